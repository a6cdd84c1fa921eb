package main

import (
	"context"
	"fmt"

	"megago/data"
	"megago/examples/internal/corpus"
)

// mockMinDocuments is the fewest mock documents generated: enough for a validation split
// of a few documents with the default --split.
const mockMinDocuments = 200

// mockSplit builds n samples of split part of --mock-data's documents (corpus.Mock,
// Megatron's MockGPTLowLevelDataset), cut by --split as Megatron's MockGPTDataset does.
// Megatron generates 100000 documents (about 2·10⁸ tokens); here there are as many as
// one epoch of the first split built (the training one) needs, at most 100000: an epoch
// that large takes seconds to index at a short --seq-length, and the datasets repeat
// epochs as needed anyway.
func (corp *trainingData) mockSplit(ctx context.Context, part data.Split, n int, gc data.GPTConfig) (data.Dataset[data.GPTSample], error) {
	if corp.mock == nil {
		docs := min(corpus.MockDocuments, max(mockMinDocuments, n*(gc.SeqLen+1)/(corpus.MockMaxLength/2)*2))
		eod := corp.tok.Special().EOD
		if eod < 0 {
			return nil, fmt.Errorf("--mock-data: the tokenizer has no end-of-document id to end the mock documents with")
		}
		corp.mock = corpus.NewMock(docs, corp.tok.VocabSize(), eod)
		corp.about = fmt.Sprintf("--mock-data: %d generated documents of 1 to %d tokens (ids 1, 2, ..., then EOD), as Megatron's MockGPTDataset",
			docs, corpus.MockMaxLength-1)
	}
	gc.Name = "megatron-mock" // the cache key; the lengths' digest is part of it
	ds, err := data.NewGPTDataset(ctx, corp.mock, part, n, gc)
	if err != nil {
		return nil, fmt.Errorf("--mock-data: %s samples: %w", part, err)
	}
	if part == data.SplitTrain {
		info := ds.Info()
		corp.unigram = corp.mock.Unigram(info.First, info.Last)
	}
	return ds, nil
}
