package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"

	"megago/data"
	"megago/examples/internal/corpus"
)

// trainingData is what every rank trains on: the tokenizer (with T5's sentinels), the
// training and validation samples, and what the run says about them. It is the same on
// every rank (datasets are deterministic and safe for concurrent use), so in-process
// ranks share one.
type trainingData struct {
	tok          data.Tokenizer
	special      data.SpecialIDs
	sentinels    map[int32]bool
	text         []bool // [V] ids that are text, not sentinels, EOS, pad or BOS
	start        int32  // the decoder's first input: BOS, or pad when the tokenizer has none
	train, valid data.Dataset[data.T5Sample]
	about        string // one line: where the tokens come from
	sources      []*data.IndexedDataset
}

func (c *trainingData) Close() {
	for _, s := range c.sources {
		s.Close()
	}
}

// loadCorpus opens --data-path, or the default corpus (building it on first use, one
// sentence per line of Go source), and builds the span-corruption samples of the whole
// run. builder is true on the one rank per host that may write the cache; the others
// wait for its files. It checks that every token id fits the tokenizer's vocabulary.
func loadCorpus(ctx context.Context, c *config, builder bool, log io.Writer) (*trainingData, error) {
	tc := c.Tokenizer()
	text, err := data.NewTokenizer(tc) // the corpus is tokenized without the added ids
	if err != nil {
		return nil, fmt.Errorf("--tokenizer-type %s: %w", c.TokenizerType, err)
	}
	tc.VocabExtraIDs = c.VocabExtraIDs
	tok, err := data.NewTokenizer(tc)
	if err != nil {
		return nil, fmt.Errorf("--tokenizer-type %s --vocab-extra-ids %d: %w", c.TokenizerType, c.VocabExtraIDs, err)
	}
	corp := &trainingData{tok: tok, special: tok.Special(), sentinels: map[int32]bool{}}
	corp.text = make([]bool, tok.VocabSize())
	for i := range corp.text {
		corp.text[i] = true
	}
	for _, id := range corp.special.Sentinels {
		corp.sentinels[id] = true
		corp.text[id] = false
	}
	for _, id := range []int32{corp.special.EOS, corp.special.Pad, corp.special.BOS} {
		if id >= 0 {
			corp.text[id] = false
		}
	}
	spec := corpus.Spec{Tokenizer: text, Sentences: corpus.Lines, Unit: "files-lines"}
	if corp.sources, corp.about, _, err = corpus.Sources(ctx, &c.Common, spec, tok.VocabSize(), builder, log); err != nil {
		return nil, err
	}
	cache, _ := c.Cache() // checked by corpus.Sources
	dc := data.T5Config{EncSeqLen: c.SeqLength, DecSeqLen: c.DecoderSeqLength, Seed: c.Seed, Split: c.Split,
		MaskProb: c.MaskProb, ShortSeqProb: c.ShortSeqProb, Special: corp.special,
		Cache: data.IndexCache{Dir: filepath.Join(cache, "index"), Builder: builder}}
	if err := dc.Validate(); err != nil {
		corp.Close()
		return nil, fmt.Errorf("--tokenizer-type %s: %w", c.TokenizerType, err)
	}
	nTrain, nValid := c.TrainSamplesNeeded(), c.EvalIters*c.GlobalBatchSize
	corp.train, err = corp.split(ctx, c, data.SplitTrain, nTrain, dc)
	if err == nil && nValid > 0 {
		corp.valid, err = corp.split(ctx, c, data.SplitValid, nValid, dc)
	}
	if err != nil {
		corp.Close()
		return nil, err
	}
	return corp, nil
}

// split builds the samples of one split: one dataset, or a blend of several
// (corpus.BlendSplit: --data-path cut by --split, or the split's own path).
func (corp *trainingData) split(ctx context.Context, c *config, part data.Split, n int, dc data.T5Config) (data.Dataset[data.T5Sample], error) {
	return corpus.BlendSplit(&c.Common, corp.sources, part, n, func(src *data.IndexedDataset, split string, count int) (data.Dataset[data.T5Sample], error) {
		dc.Split = split
		ds, err := data.NewT5Dataset(ctx, src, part, count, dc)
		if err != nil {
			return nil, fmt.Errorf("%s samples of %s: %w", part, src.Prefix(), err)
		}
		corp.start = ds.DecoderStart()
		return ds, nil
	})
}

// sentinel reports whether id is one of T5's sentinels.
func (corp *trainingData) sentinel(id int32) bool { return corp.sentinels[id] }
