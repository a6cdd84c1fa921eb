package data_test

import (
	"context"
	"fmt"

	"megago/data"
)

// A GPT dataset over three documents ending in EOD (0): 12 tokens make
// ⌊(12 − 1)/4⌋ = 2 samples of 4 inputs, each reading 5 tokens of the stream of
// shuffled documents, the last one shared with the next sample. Here the documents were
// shuffled to the order 1, 0, 2, giving the stream 4 5 0 1 2 3 0 6 7 8 9 0: samples
// [4 5 0 1 2] and [2 3 0 6 7] (served in shuffled order), with the last
// 12 − 2·4 − 1 = 3 tokens left over. The loss mask is 0 where the input is EOD.
func ExampleNewGPTDataset() {
	src := &data.MemorySource{Seqs: [][]int32{{1, 2, 3, 0}, {4, 5, 0}, {6, 7, 8, 9, 0}}}
	cfg := data.GPTConfig{SeqLen: 4, Seed: 1234, Split: "1", EOD: 0, EODMaskLoss: true}
	ds, err := data.NewGPTDataset(context.Background(), src, data.SplitTrain, 0, cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("samples:", ds.Len(), "epochs:", ds.Info().Epochs)
	for i := range ds.Len() {
		s := ds.Sample(i)
		fmt.Println(s.Tokens, s.Labels, s.LossMask)
	}

	sampler := data.NewPretrainingSampler(ds.Len(), 0, 2, 0, 1)
	l := data.NewLoader(context.Background(), sampler.Batches(), data.CollateGPT(ds), data.LoaderConfig{})
	defer l.Close()
	for b, err := range l.All() {
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println("batch", b.B, "×", b.T, b.Tokens)
	}
	// Output:
	// samples: 2 epochs: 1
	// [2 3 0 6] [3 0 6 7] [1 1 0 1]
	// [4 5 0 1] [5 0 1 2] [1 1 0 1]
	// batch 2 × 4 [2 3 0 6 4 5 0 1]
}
