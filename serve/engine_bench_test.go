package serve

import (
	"context"
	"fmt"
	"testing"

	"megago/nn"
	"megago/parallel"
	"megago/tensor"
)

// BenchmarkDecodeStep times one decode step (one new token per sequence, 128 cached
// positions each) of a GPT-2-124M-shaped model cut to 2 layers, by number of sequences.
func BenchmarkDecodeStep(b *testing.B) {
	cfg := nn.GPTConfig{TransformerConfig: nn.TransformerConfig{NumLayers: 2, Hidden: 768, Heads: 12,
		Vocab: 50257, MaxPosition: 1024, Bias: true}}
	m, err := nn.NewGPT(&nn.Builder{Dev: tensor.NewCPU(), DType: tensor.F32, RNG: tensor.NewRNG(1), TP: parallel.Self()}, cfg, nn.Stage{})
	if err != nil {
		b.Fatal(err)
	}
	const past = 128
	for _, n := range []int{1, 8, 32} {
		b.Run(fmt.Sprintf("seqs=%d", n), func(b *testing.B) {
			c := nn.NewSlotCache(m, n, past+1)
			defer c.Release()
			ids := make([]int32, n)
			seqs := make([]nn.DecodeSeq, n)
			for i := range seqs {
				seqs[i] = nn.DecodeSeq{Slot: i, Past: past, N: 1, Logits: 1}
			}
			p := nn.Eval(context.Background())
			for b.Loop() {
				if _, err := m.DecodeStep(p, c, ids, seqs); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "tok/s")
		})
	}
}
