package cuda

import (
	"math"
	"math/rand/v2"
	"testing"

	"megago/tensor"
)

// The optimizer and vocabulary-parallel cross-entropy kernels, called through the
// Backend interface on the CPU and on the GPU with the same data.

func TestGPUOptimizerKernels(t *testing.T) {
	b := openTestBackend(t)
	const n = 1000
	segs := []tensor.OptimSegment{{Off: 0, N: 300, LR: 1e-2, WeightDecay: 0.1}, {Off: 300, N: 0, LR: 5}, {Off: 350, N: 600, LR: 3e-3}}
	run := func(dev *tensor.Device) map[string]*tensor.Tensor {
		r := rand.New(rand.NewPCG(11, 12))
		vals := func(lo, hi float64) []float32 {
			v := make([]float32, n)
			for i := range v {
				v[i] = float32(lo + (hi-lo)*r.Float64())
			}
			return v
		}
		be := dev.Backend()
		out := map[string]*tensor.Tensor{}
		for _, decoupled := range []bool{false, true} {
			name := map[bool]string{false: "adam", true: "adamw"}[decoupled]
			p := tensor.FromSlice(dev, vals(-1, 1), n)
			g := tensor.FromSlice(dev, vals(-1, 1), n).Cast(tensor.BF16)
			m, v := tensor.FromSlice(dev, vals(-0.1, 0.1), n), tensor.FromSlice(dev, vals(0, 0.01), n)
			model := tensor.Zeros(dev, tensor.BF16, n)
			ap := tensor.AdamParams{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, BiasCorrection1: 1 - math.Pow(0.9, 3),
				BiasCorrection2: 1 - math.Pow(0.95, 3), Decoupled: decoupled, GradScale: 0.5}
			be.AdamStep(ap, segs, p.Span(), g.Span(), m.Span(), v.Span(), model.Span())
			out[name+"/param"], out[name+"/m"], out[name+"/v"], out[name+"/model"] = p, m, v, model
		}
		for _, nesterov := range []bool{false, true} {
			name := map[bool]string{false: "sgd", true: "nesterov"}[nesterov]
			p, g, buf := tensor.FromSlice(dev, vals(-1, 1), n), tensor.FromSlice(dev, vals(-1, 1), n), tensor.FromSlice(dev, vals(-1, 1), n)
			be.SGDStep(tensor.SGDParams{Momentum: 0.9, Dampening: 0.1, Nesterov: nesterov, GradScale: 2}, segs, p.Span(), g.Span(), buf.Span(), tensor.Span{})
			out[name+"/param"], out[name+"/buf"] = p, buf
		}
		x := tensor.FromSlice(dev, vals(-3, 3), n).Cast(tensor.F16)
		sq := tensor.Zeros(dev, tensor.F64, 3)
		be.SumSquares(sq.Span(), x.Span(), [][2]int{{0, 1000}, {10, 10}, {5, 700}})
		out["sumsq"] = sq
		main, grad := tensor.FromSlice(dev, vals(-1, 1), n), tensor.FromSlice(dev, vals(-1, 1), n).Cast(tensor.BF16)
		be.AccumulateGrad(main.Span(), grad.Span())
		out["accum/main"], out["accum/grad"] = main, grad
		return out
	}
	compareResults(t, run(tensor.NewCPU()), run(tensor.NewDevice(b)), map[string]bool{"accum/grad": true})
}

func TestGPUVocabCrossEntropyKernels(t *testing.T) {
	b := openTestBackend(t)
	const rows, width = 5, 12
	run := func(dev *tensor.Device) map[string]*tensor.Tensor {
		r := rand.New(rand.NewPCG(13, 14))
		lg := make([]float32, rows*width)
		for i := range lg {
			lg[i] = float32(6*r.Float64() - 3)
		}
		be := dev.Backend()
		out := map[string]*tensor.Tensor{}
		// This rank holds global columns [20, 32) of a 30-class vocabulary: 10 classes and 2
		// padding columns; row 1's target is here, row 3 is ignored.
		p := tensor.VocabCrossEntropyParams{Start: 20, Vocab: 30, Ignore: true, IgnoreIndex: -1, LabelSmoothing: 0.1}
		logits := tensor.FromSlice(dev, lg, rows, width)
		targets := tensor.FromSlice(dev, []int64{3, 25, 29, -1, 0}, rows)
		stats := tensor.Zeros(dev, tensor.F64, 4, rows)
		be.VocabCrossEntropyStats(stats.Span(), logits.Span(), targets.Span(), p)
		loss := tensor.Zeros(dev, tensor.F32, rows)
		be.VocabCrossEntropyLoss(loss.Span(), stats.Span(), targets.Span(), p)
		dloss := tensor.FromSlice(dev, []float32{1, 0.5, -2, 1, 0.25}, rows)
		dlogits := tensor.Zeros(dev, tensor.F32, rows, width)
		be.VocabCrossEntropyBackward(dlogits.Span(), logits.Span(), targets.Span(), stats.Span(), dloss.Span(), p)
		// The statistics are float64 sums of float32 exponentials: compare them as float32.
		out["stats"], out["loss"], out["dlogits"] = stats.Cast(tensor.F32), loss, dlogits
		return out
	}
	compareResults(t, run(tensor.NewCPU()), run(tensor.NewDevice(b)), nil)
}
