package nn

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"megago/parallel"
	"megago/tensor"
)

// BenchmarkVocabParallelCrossEntropy times the cross entropy at the workloads' logits
// shapes (shared/BENCHMARKS.md: W1 [4·64, 50304] with V 50257, W2 [8·256, 8192]) on one
// TP rank, F32. GB/s counts the logits read (forward), and the logits read plus dlogits
// written (backward: one backward pass, the forward untimed). The machine is shared:
// run with -count and compare medians.
//
//	go test ./nn -run '^$' -bench VocabParallelCrossEntropy -count 5
func BenchmarkVocabParallelCrossEntropy(b *testing.B) {
	for _, w := range []struct {
		name            string
		rows, vp, vocab int
		labelSmoothing  float64
	}{
		{"W1_256x50304", 256, 50304, 50257, 0},
		{"W2_2048x8192", 2048, 8192, 8192, 0},
		{"W2_2048x8192_smoothing", 2048, 8192, 8192, 0.1},
	} {
		dev := tensor.NewCPU()
		r := rand.New(rand.NewPCG(3, uint64(w.rows)))
		x := make([]float32, w.rows*w.vp)
		for i := range x {
			x[i] = float32(r.NormFloat64() * 2)
		}
		tg := make([]int64, w.rows)
		for i := range tg {
			tg[i] = int64(r.IntN(w.vocab))
		}
		logits := tensor.FromSlice(dev, x, w.rows, w.vp)
		targets := tensor.FromSlice(dev, tg, w.rows)
		dloss := tensor.Full(dev, tensor.F32, 1.0/float64(w.rows), w.rows)
		o := CrossEntropyOptions{Vocab: w.vocab, LabelSmoothing: w.labelSmoothing}
		p := Eval(context.Background())
		n := float64(w.rows * w.vp)
		b.Run(fmt.Sprintf("fwd/%s", w.name), func(b *testing.B) {
			for b.Loop() {
				s := dev.NewScope()
				dev.NoGrad(func() { VocabParallelCrossEntropy(p, parallel.Self(), logits, targets, o) })
				s.Close()
			}
			b.ReportMetric(4*n*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
		})
		b.Run(fmt.Sprintf("bwd/%s", w.name), func(b *testing.B) {
			f := newVocabCE(p, parallel.Self(), logits, targets, o)
			f.Forward([]*tensor.Tensor{logits})
			for b.Loop() {
				s := dev.NewScope()
				f.Backward([]*tensor.Tensor{dloss})
				s.Close()
			}
			b.ReportMetric(8*n*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
		})
	}
}
