package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"

	"megago/data"
	"megago/examples/internal/corpus"
	"megago/nn"
	"megago/parallel"
	"megago/tensor"
	"megago/train"
)

// trainingData is what every rank trains on: the tokenizer, the training and validation
// datasets, and what the run says about them. It is the same on every rank (datasets
// are deterministic and safe for concurrent use), so in-process ranks share one.
type trainingData struct {
	tok          data.Tokenizer
	train, valid data.Dataset[data.GPTSample]
	about        string         // one line: where the tokens come from
	unigram      corpus.Unigram // of the training split
	sources      []*data.IndexedDataset
	mock         *corpus.Mock // --mock-data's documents, instead of sources
}

func (c *trainingData) Close() {
	for _, s := range c.sources {
		s.Close()
	}
}

// loadCorpus opens --data-path, or the default corpus (building it on first use), and
// builds the training and validation samples of the whole run. builder is true on the
// one rank per host that may write the cache; the others wait for its files. It checks
// that every token id fits the tokenizer's vocabulary, and first that the tokenizer has
// the end-of-document token --eod-mask-loss and the resets need.
func loadCorpus(ctx context.Context, c *config, builder bool, log io.Writer) (*trainingData, error) {
	tok, err := data.NewTokenizer(c.Tokenizer())
	if err != nil {
		return nil, fmt.Errorf("--tokenizer-type %s: %w", c.TokenizerType, err)
	}
	if err := c.Docs.check(tok.Special().EOD, c.TokenizerType); err != nil {
		return nil, err
	}
	corp := &trainingData{tok: tok}
	if !c.MockData { // --mock-data: mock.go
		corp.sources, corp.about, _, err = corpus.Sources(ctx, &c.Common, corpus.Spec{Tokenizer: tok}, tok.VocabSize(), builder, log)
		if err != nil {
			return nil, err
		}
	}
	cache, err := c.Cache()
	if err != nil {
		return nil, err
	}
	gc := data.GPTConfig{SeqLen: c.SeqLength, Seed: c.Seed, Split: c.Split, EOD: tok.Special().EOD,
		EODMaskLoss: c.Docs.EODMaskLoss, ResetPositionIDs: c.Docs.ResetPositionIDs, ResetAttentionMask: c.Docs.ResetAttentionMask,
		Cache: data.IndexCache{Dir: filepath.Join(cache, "index"), Builder: builder}}
	nTrain, nValid := c.TrainSamplesNeeded(), c.EvalIters*c.GlobalBatchSize
	corp.train, err = corp.split(ctx, c, data.SplitTrain, nTrain, gc)
	if err == nil && nValid > 0 {
		corp.valid, err = corp.split(ctx, c, data.SplitValid, nValid, gc)
	}
	if err != nil {
		corp.Close()
		return nil, err
	}
	return corp, nil
}

// split builds the samples of one split: one dataset, or a blend of several
// (corpus.BlendSplit: --data-path cut by --split, or the split's own path).
func (corp *trainingData) split(ctx context.Context, c *config, part data.Split, n int, gc data.GPTConfig) (data.Dataset[data.GPTSample], error) {
	if c.MockData {
		return corp.mockSplit(ctx, part, n, gc)
	}
	return corpus.BlendSplit(&c.Common, corp.sources, part, n, func(src *data.IndexedDataset, split string, count int) (data.Dataset[data.GPTSample], error) {
		gc.Split = split
		ds, err := data.NewGPTDataset(ctx, src, part, count, gc)
		if err != nil {
			return nil, fmt.Errorf("%s samples of %s: %w", part, src.Prefix(), err)
		}
		if part == data.SplitTrain {
			info := ds.Info()
			if info.Last == info.First {
				return nil, fmt.Errorf("%s has no training documents with --split %s", src.Prefix(), gc.Split)
			}
			if err := corp.unigram.Add(src, info.First, info.Last); err != nil {
				return nil, err
			}
		}
		return ds, nil
	})
}

// entropy returns the unigram entropy of the training tokens in nats: the loss of the
// best model that ignores context, which the trained model must beat.
func (corp *trainingData) entropy() float64 { return corp.unigram.Entropy() }

// gptBatches holds one iteration's micro-batches of this DP rank.
type gptBatches []data.GPTBatch

// labels returns micro-batch i's targets with -100 (ignored) where the loss mask is 0.
func (bs gptBatches) labels(i int) []int32 {
	b := bs[i]
	out := make([]int32, len(b.Labels))
	for j, l := range b.Labels {
		out[j] = l
		if b.LossMask[j] == 0 {
			out[j] = -100
		}
	}
	return out
}

// microBatches returns the micro-batches as the trainer reads them on context-parallel
// rank cp: token ids and labels [B, T/cp] (I32), with each token's position when
// positions (--reset-position-ids) and its document when the batches carry them
// (--reset-attention-mask).
func (bs gptBatches) microBatches(dev *tensor.Device, positions bool, cp cpRank) func(micro int) train.GPTMicroBatch {
	return func(i int) train.GPTMicroBatch {
		b := bs[i]
		part := func(v []int32) *tensor.Tensor { // [B, T/cp]
			return tensor.FromSlice(dev, cp.slice(v, b.B, b.T), b.B, b.T/cp.size)
		}
		mb := train.GPTMicroBatch{IDs: part(b.Tokens), Labels: part(bs.labels(i))}
		if positions {
			mb.Positions = part(b.PositionIDs)
		}
		if b.Segments != nil {
			mb.Segments = part(b.Segments)
		}
		return mb
	}
}

// cpRank is a rank's place in its context-parallel group: rank of size.
type cpRank struct{ rank, size int }

// cpRankOf returns mesh's rank's place in its context-parallel group.
func cpRankOf(mesh *parallel.Mesh) cpRank {
	return cpRank{rank: mesh.Coord().CP, size: mesh.Sizes().CP}
}

// slice returns the positions of the sequence that the rank holds, nn.CPPositions, of
// each of the b rows of v [b, t]: [b, t/size], Megatron's get_batch_on_this_cp_rank. With
// one rank it returns v.
func (r cpRank) slice(v []int32, b, t int) []int32 {
	if r.size <= 1 {
		return v
	}
	pos := nn.CPPositions(t, r.size, r.rank)
	out := make([]int32, 0, b*len(pos))
	for row := range b {
		for _, p := range pos {
			out = append(out, v[row*t+p])
		}
	}
	return out
}
