package main

import (
	"context"
	"fmt"

	"megago/data"
	"megago/examples/internal/corpus"
)

// mockSplit builds n samples of split part of --mock-data's documents (corpus.Mock,
// Megatron's MockGPTLowLevelDataset), cut by --split as Megatron's MockGPTDataset does.
func (corp *trainingData) mockSplit(ctx context.Context, part data.Split, n int, gc data.GPTConfig) (data.Dataset[data.GPTSample], error) {
	if corp.mock == nil {
		eod := corp.tok.Special().EOD
		if eod < 0 {
			return nil, fmt.Errorf("--mock-data: the tokenizer has no end-of-document id to end the mock documents with")
		}
		corp.mock = corpus.NewMock(corp.tok.VocabSize(), eod)
		corp.about = fmt.Sprintf("--mock-data: %d generated documents of 1 to %d tokens (ids 1, 2, ..., then EOD), as Megatron's MockGPTDataset",
			corpus.MockDocuments, corpus.MockMaxLength-1)
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
