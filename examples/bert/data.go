package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"

	"megago/data"
	"megago/examples/internal/corpus"
	"megago/tensor"
	"megago/train"
)

// bertData is what every rank trains on: the tokenizer, the training and validation
// samples, and what the run says about them. It is the same on every rank (datasets are
// deterministic and safe for concurrent use), so in-process ranks share one.
type bertData struct {
	tok          data.Tokenizer
	train, valid data.Dataset[data.BERTSample]
	about        string         // one line: where the tokens come from
	unigram      corpus.Unigram // of the training split
	sources      []*data.IndexedDataset
}

func (d *bertData) Close() {
	for _, s := range d.sources {
		s.Close()
	}
}

// newTokenizer returns --tokenizer-type's tokenizer with whichever of [CLS], [SEP],
// [MASK] and [PAD] it lacks appended, in that order (data.AddSpecialTokens).
func newTokenizer(c *config) (data.Tokenizer, error) {
	tok, err := data.NewTokenizer(c.Tokenizer())
	if err != nil {
		return nil, fmt.Errorf("--tokenizer-type %s: %w", c.TokenizerType, err)
	}
	s, add := tok.Special(), data.AddedSpecial{}
	if s.CLS < 0 {
		add.CLS = "[CLS]"
	}
	if s.SEP < 0 {
		add.SEP = "[SEP]"
	}
	if s.Mask < 0 {
		add.Mask = "[MASK]"
	}
	if s.Pad < 0 {
		add.Pad = "[PAD]"
	}
	if add == (data.AddedSpecial{}) {
		return tok, nil
	}
	added, err := data.AddSpecialTokens(tok, add)
	if err != nil {
		return nil, err
	}
	return added, nil
}

// openSources opens --data-path, or the default corpus with one document per top-level
// declaration and one sentence per line (building it on first use); it returns the sources, the tokenizer and a line
// describing them, and for the default corpus the file of each document.
func openSources(ctx context.Context, c *config, builder bool, log io.Writer) (_ []*data.IndexedDataset, _ data.Tokenizer, about string, files []string, err error) {
	tok, err := newTokenizer(c)
	if err != nil {
		return nil, nil, "", nil, err
	}
	spec := corpus.Spec{Tokenizer: tok, Documents: corpus.Declarations, Sentences: corpus.Lines, Unit: "declarations-lines"}
	sources, about, files, err := corpus.Sources(ctx, &c.Common, spec, tok.VocabSize(), builder, log)
	return sources, tok, about, files, err
}

// loadData opens the data and builds the training and validation samples of the whole
// run. builder is true on the one rank per host that may write the cache; the others
// wait for its files.
func loadData(ctx context.Context, c *config, builder bool, log io.Writer) (*bertData, error) {
	sources, tok, about, _, err := openSources(ctx, c, builder, log)
	if err != nil {
		return nil, err
	}
	d := &bertData{tok: tok, about: about, sources: sources}
	cache, _ := c.Cache()
	bc := data.BERTConfig{SeqLen: c.SeqLength, Seed: c.Seed, Split: c.Split, MaskProb: c.MaskProb, MaxNgram: c.MaskingMaxNgram,
		ShortSeqProb: c.ShortSeqProb, Special: tok.Special(), VocabSize: tok.VocabSize(),
		Cache: data.IndexCache{Dir: filepath.Join(cache, "index"), Builder: builder}}
	build := func(part data.Split) func(src *data.IndexedDataset, split string, n int) (data.Dataset[data.BERTSample], error) {
		return func(src *data.IndexedDataset, split string, n int) (data.Dataset[data.BERTSample], error) {
			if part == data.SplitTrain {
				if err := d.countTokens(src, split); err != nil {
					return nil, err
				}
			}
			bc := bc
			bc.Split = split
			return data.NewBERTDataset(ctx, src, part, n, bc)
		}
	}
	nTrain, nValid := c.TrainSamplesNeeded(), c.EvalIters*c.GlobalBatchSize
	d.train, err = corpus.BlendSplit(&c.Common, sources, data.SplitTrain, nTrain, build(data.SplitTrain))
	if err == nil && nValid > 0 {
		d.valid, err = corpus.BlendSplit(&c.Common, sources, data.SplitValid, nValid, build(data.SplitValid))
	}
	if err != nil {
		d.Close()
		return nil, err
	}
	return d, nil
}

// countTokens counts the tokens of src's training documents for the unigram baselines.
func (d *bertData) countTokens(src *data.IndexedDataset, split string) error {
	w, err := data.ParseSplit(split)
	if err != nil {
		return err
	}
	b := data.SplitBoundaries(w, src.NumDocuments())
	if b[1] == b[0] {
		return fmt.Errorf("%s has no training documents with --split %s", src.Prefix(), split)
	}
	first, _ := src.Document(b[0])
	_, last := src.Document(b[1] - 1)
	return d.unigram.Add(src, first, last)
}

// bertBatches holds one iteration's micro-batches of this DP rank.
type bertBatches [][]data.BERTSample

// tensors returns the micro-batches as the trainer reads them (without binary labels
// when noBinary).
func (bs bertBatches) tensors(dev *tensor.Device, noBinary bool) func(micro int) train.BERTBatch {
	return func(i int) train.BERTBatch { return bertTensors(dev, bs[i], noBinary) }
}

// bertTensors lays out samples as a micro-batch: ids, token types and the attention mask
// [B, T], the masked positions (b·T + t) [N] with their labels [N] (nn.BERTInput.LMPositions:
// only they get MLM scores), and the SOP labels [B].
func bertTensors(dev *tensor.Device, samples []data.BERTSample, noBinary bool) train.BERTBatch {
	b, t := len(samples), len(samples[0].Tokens)
	ids, types, attend := make([]int32, 0, b*t), make([]int32, 0, b*t), make([]int32, 0, b*t)
	var positions, labels []int32
	order := make([]int32, b)
	for i, s := range samples {
		ids = append(ids, s.Tokens...)
		types = append(types, s.TokenTypes...)
		attend = append(attend, s.PaddingMask...)
		for j, m := range s.LossMask {
			if m != 0 {
				positions, labels = append(positions, int32(i*t+j)), append(labels, s.Labels[j])
			}
		}
		order[i] = s.IsRandom
	}
	var out train.BERTBatch
	out.In.IDs, out.In.TokenTypes = tensor.FromSlice(dev, ids, b, t), tensor.FromSlice(dev, types, b, t)
	out.In.Attend = tensor.FromSlice(dev, attend, b, t)
	if len(positions) > 0 {
		out.In.LMPositions = tensor.FromSlice(dev, positions, len(positions))
		out.LMLabels = tensor.FromSlice(dev, labels, len(labels))
	} else { // nothing masked: every position scored, every label ignored
		none := make([]int32, b*t)
		for i := range none {
			none[i] = -100
		}
		out.LMLabels = tensor.FromSlice(dev, none, b, t)
	}
	if !noBinary {
		out.BinaryLabels = tensor.FromSlice(dev, order, b)
	}
	return out
}
