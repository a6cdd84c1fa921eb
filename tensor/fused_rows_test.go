package tensor_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"megago/internal/testutil"
	"megago/tensor"
)

// Tests of the row-wise fused ops (fused_rows.go): each against its reference composition
// (forward and the gradients of every input), against finite differences in F64, the
// dropout mask against DropoutRegion's and the documented Philox recipe, and the kernels'
// independence of GOMAXPROCS. Row lengths are odd (37, 333) so the vectorised loops leave
// tails.

// rowCase is a fused op and its reference composition on the same inputs.
type rowCase struct {
	name       string
	op         tensor.FusedOp
	in         []gen
	fused, ref func(xs []*tensor.Tensor) []*tensor.Tensor
}

func outs(ts ...*tensor.Tensor) []*tensor.Tensor { return ts }

const (
	rowEps   = 1e-5
	ropeBase = 10000
)

var ropePositions = []int{7, 0, 3, 3, 12} // any positions, repeats allowed

// rowCases returns the cases with rows [b, t, c] (MLP rows [b, t, f], f = c).
func rowCases(b, t, c int) []rowCase {
	f := c
	x := func(shape ...int) gen { return uni(-2, 2, shape...) }
	full := tensor.Shape{b + 1, t, 2 * c} // x is the region at (1, 0, c): rows start at odd indices
	start := []int{1, 0, c}
	rng := tensor.NewRNG(11).Named("dropout")
	drop := func(p float64, bias, res bool) (func(xs []*tensor.Tensor) []*tensor.Tensor, func(xs []*tensor.Tensor) []*tensor.Tensor) {
		args := func(xs []*tensor.Tensor) (xb, xr *tensor.Tensor) {
			i := 1
			if bias {
				xb, i = xs[i], i+1
			}
			if res {
				xr = xs[i]
			}
			return xb, xr
		}
		return func(xs []*tensor.Tensor) []*tensor.Tensor {
				xb, xr := args(xs)
				return outs(tensor.BiasDropoutAdd(xs[0], xb, xr, p, rng, full, start))
			}, func(xs []*tensor.Tensor) []*tensor.Tensor {
				xb, xr := args(xs)
				return outs(tensor.BiasDropoutAddReference(xs[0], xb, xr, p, rng, full, start))
			}
	}
	cases := []rowCase{
		{"add_layernorm", tensor.FusedAddNorm, []gen{x(b, t, c), x(b, t, c), x(c), x(c)},
			func(xs []*tensor.Tensor) []*tensor.Tensor {
				return outs(tensor.AddLayerNorm(xs[0], xs[1], xs[2], xs[3], rowEps))
			},
			func(xs []*tensor.Tensor) []*tensor.Tensor {
				return outs(tensor.AddLayerNormReference(xs[0], xs[1], xs[2], xs[3], rowEps))
			}},
		{"add_layernorm_no_residual", tensor.FusedAddNorm, []gen{x(b, t, c), x(c), x(c)},
			func(xs []*tensor.Tensor) []*tensor.Tensor {
				return outs(tensor.AddLayerNorm(xs[0], nil, xs[1], xs[2], rowEps))
			},
			func(xs []*tensor.Tensor) []*tensor.Tensor {
				return outs(tensor.AddLayerNormReference(xs[0], nil, xs[1], xs[2], rowEps))
			}},
		{"add_layernorm_no_affine", tensor.FusedAddNorm, []gen{x(b*t, c), x(b*t, c)},
			func(xs []*tensor.Tensor) []*tensor.Tensor {
				return outs(tensor.AddLayerNorm(xs[0], xs[1], nil, nil, rowEps))
			},
			func(xs []*tensor.Tensor) []*tensor.Tensor {
				return outs(tensor.AddLayerNormReference(xs[0], xs[1], nil, nil, rowEps))
			}},
		{"add_rmsnorm", tensor.FusedAddNorm, []gen{x(b, t, c), x(b, t, c), x(c)},
			func(xs []*tensor.Tensor) []*tensor.Tensor {
				return outs(tensor.AddRMSNorm(xs[0], xs[1], xs[2], rowEps))
			},
			func(xs []*tensor.Tensor) []*tensor.Tensor {
				return outs(tensor.AddRMSNormReference(xs[0], xs[1], xs[2], rowEps))
			}},
		{"add_rmsnorm_no_residual", tensor.FusedAddNorm, []gen{x(b, t, c), x(c)},
			func(xs []*tensor.Tensor) []*tensor.Tensor { return outs(tensor.AddRMSNorm(xs[0], nil, xs[1], rowEps)) },
			func(xs []*tensor.Tensor) []*tensor.Tensor {
				return outs(tensor.AddRMSNormReference(xs[0], nil, xs[1], rowEps))
			}},
	}
	for _, form := range []tensor.UnaryOp{tensor.OpGeLUTanh, tensor.OpGeLUErf} {
		name := map[tensor.UnaryOp]string{tensor.OpGeLUTanh: "tanh", tensor.OpGeLUErf: "erf"}[form]
		cases = append(cases,
			rowCase{"bias_gelu_" + name, tensor.FusedBiasGeLU, []gen{x(b, t, f), x(f)},
				func(xs []*tensor.Tensor) []*tensor.Tensor { return outs(tensor.BiasGeLU(xs[0], xs[1], form)) },
				func(xs []*tensor.Tensor) []*tensor.Tensor { return outs(tensor.BiasGeLUReference(xs[0], xs[1], form)) }},
			rowCase{"bias_gelu_" + name + "_no_bias", tensor.FusedBiasGeLU, []gen{x(b*t, f)},
				func(xs []*tensor.Tensor) []*tensor.Tensor { return outs(tensor.BiasGeLU(xs[0], nil, form)) },
				func(xs []*tensor.Tensor) []*tensor.Tensor { return outs(tensor.BiasGeLUReference(xs[0], nil, form)) }})
	}
	cases = append(cases,
		rowCase{"bias_swiglu", tensor.FusedBiasSwiGLU, []gen{x(b, t, f), x(b, t, f), x(f), x(f)},
			func(xs []*tensor.Tensor) []*tensor.Tensor { return outs(tensor.BiasSwiGLU(xs[0], xs[1], xs[2], xs[3])) },
			func(xs []*tensor.Tensor) []*tensor.Tensor {
				return outs(tensor.BiasSwiGLUReference(xs[0], xs[1], xs[2], xs[3]))
			}},
		rowCase{"bias_swiglu_no_bias", tensor.FusedBiasSwiGLU, []gen{x(b, t, f), x(b, t, f)},
			func(xs []*tensor.Tensor) []*tensor.Tensor { return outs(tensor.BiasSwiGLU(xs[0], xs[1], nil, nil)) },
			func(xs []*tensor.Tensor) []*tensor.Tensor {
				return outs(tensor.BiasSwiGLUReference(xs[0], xs[1], nil, nil))
			}},
		rowCase{"bias_swiglu_gate_bias", tensor.FusedBiasSwiGLU, []gen{x(b, t, f), x(b, t, f), x(f)},
			func(xs []*tensor.Tensor) []*tensor.Tensor { return outs(tensor.BiasSwiGLU(xs[0], xs[1], xs[2], nil)) },
			func(xs []*tensor.Tensor) []*tensor.Tensor {
				return outs(tensor.BiasSwiGLUReference(xs[0], xs[1], xs[2], nil))
			}},
	)
	for _, d := range []struct {
		name      string
		p         float64
		bias, res bool
	}{{"", 0.3, true, true}, {"_no_bias", 0.3, false, true}, {"_no_residual", 0.5, true, false}, {"_p0", 0, true, true}} {
		in := []gen{x(b, t, c)}
		if d.bias {
			in = append(in, x(c))
		}
		if d.res {
			in = append(in, x(b, t, c))
		}
		fu, ref := drop(d.p, d.bias, d.res)
		cases = append(cases, rowCase{"bias_dropout_add" + d.name, tensor.FusedBiasDropoutAdd, in, fu, ref})
	}
	for _, hs := range []int{16, 6} {
		cases = append(cases, rowCase{fmt.Sprintf("rope_hs%d", hs), tensor.FusedRoPE, []gen{x(b, 2, len(ropePositions), hs)},
			func(xs []*tensor.Tensor) []*tensor.Tensor { return outs(tensor.RoPE(xs[0], ropePositions, ropeBase)) },
			func(xs []*tensor.Tensor) []*tensor.Tensor {
				return outs(tensor.RoPEReference(xs[0], ropePositions, ropeBase))
			}})
	}
	return cases
}

// rowLeaves returns leaves of dtype dt holding the case's inputs drawn with seed, rounded
// to dt.
func rowLeaves(dev *tensor.Device, dt tensor.DType, c rowCase, seed uint64) []*tensor.Tensor {
	r := rand.New(rand.NewPCG(seed, 5))
	xs := make([]*tensor.Tensor, len(c.in))
	for i, g := range c.in {
		xs[i] = fromF64(dev, g.fill(r, tensor.Shape(g.shape).Numel()), g.shape...).Cast(dt).SetRequiresGrad(true)
	}
	return xs
}

// runRows runs f on leaves xs, back-propagates a fixed pseudo-random gradient (rounded to
// each output's dtype) into every output and returns the outputs and the leaves'
// gradients as float64 (nil where none arrived).
func runRows(f func([]*tensor.Tensor) []*tensor.Tensor, xs []*tensor.Tensor) (ys, grads [][]float64) {
	outs := f(xs)
	dys := make([]*tensor.Tensor, len(outs))
	for i, y := range outs {
		d := make([]float64, y.Numel())
		for k := range d {
			d[k] = math.Sin(float64(k) + 3*float64(i) + 1)
		}
		dys[i] = fromF64(y.Device(), d, y.Shape()...).Cast(y.DType())
		ys = append(ys, tensor.ToSlice[float64](y))
	}
	tensor.Backward(outs, dys)
	for _, x := range xs {
		var g []float64
		if x.Grad() != nil {
			g = tensor.ToSlice[float64](x.Grad())
		}
		grads = append(grads, g)
	}
	return ys, grads
}

// requireRowsClose compares two runs' outputs and gradients with requireCloseScaled.
func requireRowsClose(t *testing.T, wantY, wantG, gotY, gotG [][]float64, tol float64) {
	t.Helper()
	require.Len(t, gotY, len(wantY), "outputs")
	for i := range wantY {
		requireCloseScaled(t, wantY[i], gotY[i], tol, fmt.Sprintf("output %d", i))
	}
	for i := range wantG {
		require.Equal(t, wantG[i] == nil, gotG[i] == nil, "gradient of input %d present", i)
		requireCloseScaled(t, wantG[i], gotG[i], tol, fmt.Sprintf("gradient of input %d", i))
	}
}

// TestFusedRowsMatchReference: on every backend, in F64 and F32, each fused op's outputs
// and input gradients equal its reference composition's on the same inputs, and the op
// is counted as fused.
func TestFusedRowsMatchReference(t *testing.T) {
	// F64: the same formulas, up to the order of float64 sums (column sums over blocks):
	// a few float64 roundings (u = 1.1e-16) of the values' scale. F32: each element is
	// computed from float32 operands in float64 and rounded once or twice where the
	// reference rounds after every op: a few float32 roundings (u = 6e-8).
	tols := map[tensor.DType]float64{tensor.F64: 1e-14, tensor.F32: 5e-7}
	testutil.ForEachBackend(t, func(t *testing.T, dev *tensor.Device) {
		for ci, c := range rowCases(3, 5, 37) {
			for _, dt := range []tensor.DType{tensor.F64, tensor.F32} {
				t.Run(c.name+"/"+dt.String(), func(t *testing.T) {
					before := dev.FusedCount(c.op)
					gotY, gotG := runRows(c.fused, rowLeaves(dev, dt, c, uint64(ci)))
					require.Equal(t, before+1, dev.FusedCount(c.op), "fused count of %v", c.op)
					wantY, wantG := runRows(c.ref, rowLeaves(dev, dt, c, uint64(ci)))
					require.Equal(t, before+1, dev.FusedCount(c.op), "the reference is not fused")
					requireRowsClose(t, wantY, wantG, gotY, gotG, tols[dt])
				})
			}
		}
	})
}

// TestFusedRowsLowPrecision runs each fused op in BF16 and F16 and compares its outputs
// and gradients with the F64 reference on the same (rounded) inputs and output gradients.
func TestFusedRowsLowPrecision(t *testing.T) {
	// The fused op computes in float32 and rounds each output once (unit roundoff u:
	// 3.9e-3 for BF16, 4.9e-4 for F16); its inputs, and the output gradients, are the
	// reference's. A few u of the values' scale.
	dev := tensor.NewCPU()
	for _, d := range []struct {
		dt  tensor.DType
		tol float64
	}{{tensor.BF16, 1.6e-2}, {tensor.F16, 2e-3}} {
		for ci, c := range rowCases(3, 5, 37) {
			t.Run(c.name+"/"+d.dt.String(), func(t *testing.T) {
				lo := rowLeaves(dev, d.dt, c, uint64(ci))
				hi := make([]*tensor.Tensor, len(lo))
				for i, x := range lo {
					hi[i] = x.Detach().Cast(tensor.F64).SetRequiresGrad(true)
				}
				gotY, gotG := runRows(c.fused, lo)
				wantY, wantG := runRows(func(xs []*tensor.Tensor) []*tensor.Tensor {
					ys := c.ref(xs)
					for i, y := range ys { // the output gradients the low-precision run gets
						ys[i] = y.Cast(d.dt).Cast(tensor.F64)
					}
					return ys
				}, hi)
				requireRowsClose(t, wantY, wantG, gotY, gotG, d.tol)
			})
		}
	}
}

// TestFusedRowsGradCheck checks each fused op's gradients against central differences
// in F64 (every output weighted, so the gradient of sum in AddLayerNorm is checked too).
func TestFusedRowsGradCheck(t *testing.T) {
	dev := tensor.NewCPU()
	for ci, c := range rowCases(2, 3, 7) { // F64 has no vectorised loops: small rows suffice
		t.Run(c.name, func(t *testing.T) {
			in := rowLeaves(dev, tensor.F64, c, uint64(ci))
			gradCheck(t, func(xs []*tensor.Tensor) *tensor.Tensor {
				ys := c.fused(xs)
				for i, y := range ys {
					ys[i] = y.Reshape(y.Numel())
				}
				return tensor.Concat(0, ys...)
			}, in...)
		})
	}
}

// TestBiasDropoutAddMask: the mask of a shard of a [4, 6, 40] tensor (regions that start
// inside the sequence and inside the channels, as sequence and tensor parallelism cut
// them, at even and odd indices) is DropoutRegion's for the same key, full shape and
// start, bit for bit, and the documented recipe's (referenceDropout, from Philox); the
// backward applies the same mask.
func TestBiasDropoutAddMask(t *testing.T) {
	const p = 0.25
	full := tensor.Shape{4, 6, 40}
	rng := tensor.NewRNG(2024).Named("dropout").Fold(5)
	testutil.ForEachBackend(t, func(t *testing.T, dev *tensor.Device) {
		for _, r := range []struct{ start, size []int }{
			{[]int{1, 2, 0}, []int{2, 3, 40}},  // sequence-parallel shard
			{[]int{0, 0, 5}, []int{4, 6, 35}},  // tensor-parallel shard
			{[]int{3, 5, 3}, []int{1, 1, 37}},  // one row, odd start
			{[]int{2, 1, 30}, []int{1, 2, 10}}, // short rows
		} {
			t.Run(fmt.Sprint(r.start), func(t *testing.T) {
				ones := tensor.Ones(dev, tensor.F32, r.size...).SetRequiresGrad(true)
				y := tensor.BiasDropoutAdd(ones, nil, nil, p, rng, full, r.start)
				want := tensor.DropoutRegion(tensor.Ones(dev, tensor.F32, r.size...), p, rng, full, r.start)
				require.Equal(t, bits(want), bits(y), "mask differs from DropoutRegion's")
				fs := full.Strides()
				got := tensor.ToSlice[float32](y)
				for k := range got {
					idx := unravel(k, r.size)
					g := 0
					for d := range idx {
						g += (idx[d] + r.start[d]) * fs[d]
					}
					require.Equal(t, referenceDropout(g, rng.Key(), p), got[k], "element %v", idx)
				}
				y.BackwardWithGrad(tensor.Ones(dev, tensor.F32, r.size...))
				require.Equal(t, bits(want), bits(ones.Grad()), "backward mask")
			})
		}
	})
}

// TestFusedRowsGOMAXPROCS runs every op forward and backward on rows that split across
// goroutines, at GOMAXPROCS 1 and 2, and wants the same bits.
func TestFusedRowsGOMAXPROCS(t *testing.T) {
	dev := tensor.NewCPU()
	const rows, c = 96, 333 // several row chunks and column blocks at 2 threads
	x := func(shape ...int) gen { return uni(-2, 2, shape...) }
	rng := tensor.NewRNG(3).Named("dropout")
	shape := tensor.Shape{rows, c}
	cases := []rowCase{
		{"add_layernorm", tensor.FusedAddNorm, []gen{x(rows, c), x(rows, c), x(c), x(c)},
			func(xs []*tensor.Tensor) []*tensor.Tensor {
				return outs(tensor.AddLayerNorm(xs[0], xs[1], xs[2], xs[3], rowEps))
			}, nil},
		{"bias_gelu", tensor.FusedBiasGeLU, []gen{x(rows, c), x(c)},
			func(xs []*tensor.Tensor) []*tensor.Tensor {
				return outs(tensor.BiasGeLU(xs[0], xs[1], tensor.OpGeLUTanh))
			}, nil},
		{"bias_swiglu", tensor.FusedBiasSwiGLU, []gen{x(rows, c), x(rows, c), x(c), x(c)},
			func(xs []*tensor.Tensor) []*tensor.Tensor { return outs(tensor.BiasSwiGLU(xs[0], xs[1], xs[2], xs[3])) }, nil},
		{"bias_dropout_add", tensor.FusedBiasDropoutAdd, []gen{x(rows, c), x(c), x(rows, c)},
			func(xs []*tensor.Tensor) []*tensor.Tensor {
				return outs(tensor.BiasDropoutAdd(xs[0], xs[1], xs[2], 0.1, rng, shape, []int{0, 0}))
			}, nil},
		{"rope", tensor.FusedRoPE, []gen{x(4, rows, 64)},
			func(xs []*tensor.Tensor) []*tensor.Tensor {
				pos := make([]int, rows)
				for i := range pos {
					pos[i] = 3 * i
				}
				return outs(tensor.RoPE(xs[0], pos, ropeBase))
			}, nil},
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	for ci, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var want [][]float64
			for _, procs := range []int{1, 2} {
				runtime.GOMAXPROCS(procs)
				ys, gs := runRows(tc.fused, rowLeaves(dev, tensor.F32, tc, uint64(ci)))
				got := append(ys, gs...)
				if want == nil {
					want = got
					continue
				}
				for i := range want {
					require.Equal(t, want[i], got[i], "result %d at GOMAXPROCS %d", i, procs)
				}
			}
		})
	}
}

func TestFusedRowsPanics(t *testing.T) {
	dev := tensor.NewCPU()
	x := tensor.Zeros(dev, tensor.F32, 2, 4)
	rng := tensor.NewRNG(1)
	for _, c := range []struct {
		name, want string
		fn         func()
	}{
		{"residual shape", "shapes differ", func() { tensor.AddLayerNorm(x, tensor.Zeros(dev, tensor.F32, 4, 2), nil, nil, rowEps) }},
		{"weight length", "want [4]", func() { tensor.AddRMSNorm(x, nil, tensor.Zeros(dev, tensor.F32, 3), rowEps) }},
		{"dtype", "dtypes differ", func() { tensor.BiasGeLU(x, tensor.Zeros(dev, tensor.F64, 4), tensor.OpGeLUTanh) }},
		{"gelu form", "neither OpGeLUTanh nor OpGeLUErf", func() { tensor.BiasGeLU(x, nil, tensor.OpReLU) }},
		{"up shape", "shapes differ", func() { tensor.BiasSwiGLU(x, tensor.Zeros(dev, tensor.F32, 2, 5), nil, nil) }},
		{"probability", "outside [0, 1)", func() { tensor.BiasDropoutAdd(x, nil, nil, 1, rng, x.Shape(), []int{0, 0}) }},
		{"region", "outside", func() { tensor.BiasDropoutAdd(x, nil, nil, 0.1, rng, x.Shape(), []int{1, 0}) }},
		{"odd head", "HS even", func() { tensor.RoPE(tensor.Zeros(dev, tensor.F32, 2, 3), []int{0, 1}, ropeBase) }},
		{"positions", "HS even and T positions", func() { tensor.RoPE(x, []int{0}, ropeBase) }},
		{"integer input", "float tensor", func() { tensor.BiasGeLU(tensor.Zeros(dev, tensor.I32, 2), nil, tensor.OpGeLUTanh) }},
	} {
		t.Run(c.name, func(t *testing.T) { expectPanic(t, c.want, c.fn) })
	}
}
