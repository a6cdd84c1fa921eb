package optim

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"sync"
	"testing"

	"megago/nn"
	"megago/tensor"
)

// BenchmarkAdamW measures the fused AdamW kernel on an fp32 buffer of GPT-2 small's
// size (and a small one), beside a memory-bandwidth probe over the same buffers:
//
//	fused  AdamStep: reads param, grad, m, v and writes param, m, v: 28 bytes/element
//	copy   parallel copy param→m and grad→v: 16 bytes/element, what the memory system
//	       moves at best (GOMAXPROCS goroutines, like the kernel)
//	step   Optimizer.Step: the fused kernel plus the gradient-norm pass (4 bytes/element
//	       more), clipping on
//
// GB/s counts the bytes each variant moves; compare fused's with copy's for the
// kernel's efficiency. PyTorch 1.13's torch.optim.AdamW takes ~630 ms per step at 124M
// on the reference 2-core CPU.
func BenchmarkAdamW(b *testing.B) {
	for _, n := range []int{1 << 20, 124_439_808} {
		name := fmt.Sprintf("%dM", n>>20)
		if n > 1<<20 {
			name = "124M"
		}
		dev := tensor.NewCPU()
		param := tensor.FromSlice(dev, kernelData(1<<16, 1)).Cast(tensor.F32)
		p, g := tensor.Empty(dev, tensor.F32, n), tensor.Empty(dev, tensor.F32, n)
		m, v := tensor.Zeros(dev, tensor.F32, n), tensor.Zeros(dev, tensor.F32, n)
		for i := 0; i < n; i += param.Numel() { // fill with varied values
			k := min(param.Numel(), n-i)
			p.Narrow(0, i, k).CopyFrom(param.Narrow(0, 0, k))
			g.Narrow(0, i, k).CopyFrom(param.Narrow(0, 0, k))
		}
		segs := []tensor.OptimSegment{{N: n, LR: 1e-4, WeightDecay: 0.1}}
		report := func(b *testing.B, bytesPerElem, iters int) {
			sec := b.Elapsed().Seconds() / float64(iters)
			b.ReportMetric(float64(bytesPerElem)*float64(n)/sec/1e9, "GB/s")
			b.ReportMetric(sec*1e3, "ms/step")
			b.ReportMetric(0, "ns/op")
		}
		b.Run(name+"/fused", func(b *testing.B) {
			ap := tensor.AdamParams{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, Decoupled: true, GradScale: 1}
			i := 0
			for ; b.Loop(); i++ {
				ap.BiasCorrection1, ap.BiasCorrection2 = 1-math.Pow(0.9, float64(i+1)), 1-math.Pow(0.95, float64(i+1))
				dev.Backend().AdamStep(ap, segs, p.Span(), g.Span(), m.Span(), v.Span(), tensor.Span{})
			}
			report(b, 28, i)
		})
		b.Run(name+"/copy", func(b *testing.B) {
			i := 0
			for ; b.Loop(); i++ {
				parallelCopy(dev, m, p)
				parallelCopy(dev, v, g)
			}
			report(b, 16, i)
		})
		b.Run(name+"/step", func(b *testing.B) {
			w := &nn.Param{Tensor: p.SetRequiresGrad(true), Name: "w", GlobalShape: tensor.Shape{n}, PartitionDim: -1, TPReplicated: true}
			opt, err := New([]*nn.Param{w}, Config{LR: 1e-4, WeightDecay: 0.1, ClipGrad: 1})
			if err != nil {
				b.Fatal(err)
			}
			w.Grad().CopyFrom(g)
			ctx := context.Background()
			i := 0
			for ; b.Loop(); i++ {
				if _, err := opt.Step(ctx); err != nil {
					b.Fatal(err)
				}
			}
			report(b, 32, i)
		})
		runtime.GC()
	}
}

// parallelCopy copies src into dst on GOMAXPROCS goroutines.
func parallelCopy(dev *tensor.Device, dst, src *tensor.Tensor) {
	n, w := dst.Numel(), runtime.GOMAXPROCS(0)
	chunk := (n + w - 1) / w
	var wg sync.WaitGroup
	for lo := 0; lo < n; lo += chunk {
		k := min(chunk, n-lo)
		wg.Go(func() {
			dev.Backend().Copy2D(dst.Narrow(0, lo, k).Span(), 0, src.Narrow(0, lo, k).Span(), 0, 1, k)
		})
	}
	wg.Wait()
}
