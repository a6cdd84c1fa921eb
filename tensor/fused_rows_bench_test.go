package tensor_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"megago/tensor"
)

// Benchmarks of the row-wise fused ops beside their reference compositions, in F32 at the
// workloads' shapes (bench_test.go): W1 (GPT-2 124M, 4×64 tokens: C 768, F 3072, 12 heads
// of 64) and W2 (8×256 tokens: C 256, F 1024, 4 heads of 64). GB/s counts the bytes the
// op must read and write once (the rows of its operands and results; the [C] vectors are
// left out), for the reference too, so the two rates compare times:
//
//	go test ./tensor -run '^$' -bench 'FusedRows' -benchtime 20x

// rowBench is one op at one shape: its inputs, and how many [rows, C]-sized arrays its
// forward and its backward read and write.
type rowBench struct {
	name       string
	in         [][]int
	fwd, bwd   int // arrays moved
	elems      int // elements of one array
	fused, ref func(xs []*tensor.Tensor) []*tensor.Tensor
}

func rowBenches() []rowBench {
	rng := tensor.NewRNG(1).Named("dropout")
	var out []rowBench
	for _, w := range []struct {
		name             string
		b, t, c, f, head int
	}{{"W1", 4, 64, 768, 3072, 64}, {"W2", 8, 256, 256, 1024, 64}} {
		rc, rf := []int{w.b, w.t, w.c}, []int{w.b, w.t, w.f}
		full := tensor.Shape(rc)
		zero := []int{0, 0, 0}
		pos := make([]int, w.t)
		for i := range pos {
			pos[i] = i
		}
		n, nf := w.b*w.t*w.c, w.b*w.t*w.f
		out = append(out,
			rowBench{w.name + "/add_layernorm", [][]int{rc, rc, {w.c}, {w.c}}, 4, 4, n,
				func(xs []*tensor.Tensor) []*tensor.Tensor {
					return outs(tensor.AddLayerNorm(xs[0], xs[1], xs[2], xs[3], 1e-5))
				}, func(xs []*tensor.Tensor) []*tensor.Tensor {
					return outs(tensor.AddLayerNormReference(xs[0], xs[1], xs[2], xs[3], 1e-5))
				}},
			rowBench{w.name + "/bias_gelu", [][]int{rf, {w.f}}, 2, 3, nf,
				func(xs []*tensor.Tensor) []*tensor.Tensor {
					return outs(tensor.BiasGeLU(xs[0], xs[1], tensor.OpGeLUTanh))
				}, func(xs []*tensor.Tensor) []*tensor.Tensor {
					return outs(tensor.BiasGeLUReference(xs[0], xs[1], tensor.OpGeLUTanh))
				}},
			rowBench{w.name + "/bias_swiglu", [][]int{rf, rf, {w.f}, {w.f}}, 3, 5, nf,
				func(xs []*tensor.Tensor) []*tensor.Tensor {
					return outs(tensor.BiasSwiGLU(xs[0], xs[1], xs[2], xs[3]))
				}, func(xs []*tensor.Tensor) []*tensor.Tensor {
					return outs(tensor.BiasSwiGLUReference(xs[0], xs[1], xs[2], xs[3]))
				}},
			rowBench{w.name + "/bias_dropout_add", [][]int{rc, {w.c}, rc}, 3, 2, n,
				func(xs []*tensor.Tensor) []*tensor.Tensor {
					return outs(tensor.BiasDropoutAdd(xs[0], xs[1], xs[2], 0.1, rng, full, zero))
				}, func(xs []*tensor.Tensor) []*tensor.Tensor {
					return outs(tensor.BiasDropoutAddReference(xs[0], xs[1], xs[2], 0.1, rng, full, zero))
				}},
			rowBench{w.name + "/rope", [][]int{{w.b, w.c / w.head, w.t, w.head}}, 2, 2, n,
				func(xs []*tensor.Tensor) []*tensor.Tensor { return outs(tensor.RoPE(xs[0], pos, 10000)) },
				func(xs []*tensor.Tensor) []*tensor.Tensor { return outs(tensor.RoPEReference(xs[0], pos, 10000)) }},
		)
	}
	return out
}

// BenchmarkFusedRows times each op's forward ("fwd", no graph) and forward with backward
// ("fwdbwd") for the fused op and its reference composition.
func BenchmarkFusedRows(b *testing.B) {
	dev := tensor.NewCPU()
	for _, rb := range rowBenches() {
		r := rand.New(rand.NewPCG(1, 2))
		xs := make([]*tensor.Tensor, len(rb.in))
		for i, s := range rb.in {
			xs[i] = fromF64(dev, uni(-2, 2).fill(r, tensor.Shape(s).Numel()), s...).Cast(tensor.F32).SetRequiresGrad(true)
		}
		for _, impl := range []struct {
			name string
			f    func(xs []*tensor.Tensor) []*tensor.Tensor
		}{{"fused", rb.fused}, {"reference", rb.ref}} {
			b.Run(fmt.Sprintf("%s/%s/fwd", rb.name, impl.name), func(b *testing.B) {
				for b.Loop() {
					s := dev.NewScope()
					dev.NoGrad(func() { impl.f(xs) })
					s.Close()
				}
				reportGBs(b, rb.fwd*rb.elems*4)
			})
			b.Run(fmt.Sprintf("%s/%s/fwdbwd", rb.name, impl.name), func(b *testing.B) {
				for b.Loop() {
					s := dev.NewScope()
					ys := impl.f(xs)
					dys := make([]*tensor.Tensor, len(ys))
					for i, y := range ys {
						dys[i] = tensor.Ones(dev, tensor.F32, y.Shape()...)
					}
					tensor.Backward(ys, dys)
					for _, x := range xs {
						x.ZeroGrad()
					}
					s.Close()
				}
				reportGBs(b, (rb.fwd+rb.bwd)*rb.elems*4)
			})
		}
	}
}

// reportGBs reports bytes per iteration as GB/s.
func reportGBs(b *testing.B, bytes int) {
	b.ReportMetric(float64(bytes)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
}
