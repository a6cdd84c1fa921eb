package tensor_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"megago/tensor"
)

// Finite-difference checks of every differentiable op: autograd's gradient of
// L(x) = Σ f(x)·R, for a fixed random weighting R, against central differences of L
// computed in float64.

// fdStep is the central-difference step h. With inputs of size ~1, the truncation error
// h²·f⁽³⁾/6 is ~1e-13 and the rounding error ~ulp(L)/h ~1e-10.
const fdStep = 1e-6

// gradTol is how closely autograd must match central differences with step h:
// |autograd − fd| ≤ atol + rtol·|fd|.
type gradTol struct{ h, rtol, atol float64 }

var tightGrad = gradTol{h: fdStep, rtol: 1e-6, atol: 1e-8}

// gradCheck checks the gradient autograd computes for f with respect to each of inputs (F64
// tensors; their values are copied into fresh leaves) against central differences.
func gradCheck(t *testing.T, f func(xs []*tensor.Tensor) *tensor.Tensor, inputs ...*tensor.Tensor) {
	t.Helper()
	gradCheckTol(t, tightGrad, f, inputs...)
}

func gradCheckTol(t *testing.T, tol gradTol, f func(xs []*tensor.Tensor) *tensor.Tensor, inputs ...*tensor.Tensor) {
	t.Helper()
	require.NotEmpty(t, inputs)
	dev := inputs[0].Device()
	vals := make([][]float64, len(inputs))
	shapes := make([]tensor.Shape, len(inputs))
	for i, x := range inputs {
		require.Equal(t, tensor.F64, x.DType(), "gradCheck input %d", i)
		vals[i] = tensor.ToSlice[float64](x)
		shapes[i] = x.Shape().Clone()
	}
	leaves := func(grad bool) []*tensor.Tensor {
		xs := make([]*tensor.Tensor, len(vals))
		for i := range vals {
			xs[i] = fromF64(dev, vals[i], shapes[i]...).SetRequiresGrad(grad)
		}
		return xs
	}

	xs := leaves(true)
	y := f(xs)
	require.Equal(t, tensor.F64, y.DType())
	require.True(t, y.RequiresGrad(), "output of f does not require grad")
	wr := rand.New(rand.NewPCG(uint64(y.Numel()), 17))
	r := make([]float64, y.Numel())
	for k := range r {
		r[k] = 2*wr.Float64() - 1
	}
	// Σ y·R has gradient R with respect to y.
	y.BackwardWithGrad(fromF64(dev, r, y.Shape()...))

	loss := func() float64 {
		var v float64
		dev.NoGrad(func() { v = dotExact(tensor.ToSlice[float64](f(leaves(false))), r) })
		return v
	}
	for i, x := range xs {
		g := make([]float64, len(vals[i]))
		if x.Grad() != nil {
			require.Equal(t, shapes[i], x.Grad().Shape(), "grad shape of input %d", i)
			g = tensor.ToSlice[float64](x.Grad())
		}
		bad := 0
		for j, v := range vals[i] {
			vals[i][j] = v + tol.h
			lp := loss()
			vals[i][j] = v - tol.h
			lm := loss()
			vals[i][j] = v
			fd := (lp - lm) / (2 * tol.h)
			if !(math.Abs(g[j]-fd) <= tol.atol+tol.rtol*math.Abs(fd)) {
				if bad++; bad <= 5 {
					t.Errorf("input %d %v element %d: autograd %.12g, finite difference %.12g (diff %.3g)",
						i, shapes[i], j, g[j], fd, g[j]-fd)
				}
			}
		}
	}
}

// dotExact returns Σ a[k]·b[k] with compensated summation, so that the finite difference
// sees the ops' rounding and not the reduction's.
func dotExact(a, b []float64) float64 {
	var s, c float64
	add := func(x float64) {
		t := s + x
		if math.Abs(s) >= math.Abs(x) {
			c += (s - t) + x
		} else {
			c += (x - t) + s
		}
		s = t
	}
	for k := range a {
		p := a[k] * b[k]
		add(p)
		add(math.FMA(a[k], b[k], -p))
	}
	return s + c
}

// gen makes the values of one input of a gradient case.
type gen struct {
	shape []int
	fill  func(r *rand.Rand, n int) []float64
}

// uni draws uniformly from [lo, hi).
func uni(lo, hi float64, shape ...int) gen {
	return gen{shape, func(r *rand.Rand, n int) []float64 {
		v := make([]float64, n)
		for i := range v {
			v[i] = lo + (hi-lo)*r.Float64()
		}
		return v
	}}
}

// away draws from [-2, -0.2] ∪ [0.2, 2], away from a kink at 0.
func away(shape ...int) gen {
	return gen{shape, func(r *rand.Rand, n int) []float64 {
		v := make([]float64, n)
		for i := range v {
			v[i] = 0.2 + 1.8*r.Float64()
			if r.IntN(2) == 0 {
				v[i] = -v[i]
			}
		}
		return v
	}}
}

// distinct draws values at least 0.1 apart (a shuffled grid with jitter), so max has no
// near-ties within the finite-difference step.
func distinct(shape ...int) gen {
	return gen{shape, func(r *rand.Rand, n int) []float64 {
		v := make([]float64, n)
		for i, p := range r.Perm(n) {
			v[i] = 0.2*float64(p) - 0.1*float64(n) + 0.05*r.Float64()
		}
		return v
	}}
}

type gradCase struct {
	name string
	in   []gen
	f    func(xs []*tensor.Tensor) *tensor.Tensor
	tol  *gradTol // nil: tightGrad
}

// fromF64 is FromSlice that also makes 0-dim tensors (an empty shape).
func fromF64(dev *tensor.Device, v []float64, shape ...int) *tensor.Tensor {
	if len(shape) == 0 {
		return tensor.Scalar(dev, tensor.F64, v[0])
	}
	return tensor.FromSlice(dev, v, shape...)
}

// ids makes an integer tensor (ids, targets, masks) on x's device.
func ids(x *tensor.Tensor, v []int64, shape ...int) *tensor.Tensor {
	return tensor.FromSlice(x.Device(), v, shape...)
}

// causalMaskI64 is 1 where key j is hidden from query i of a [tq, tk] score matrix: j > i + tk − tq.
func causalMaskI64(tq, tk int) []int64 {
	m := make([]int64, tq*tk)
	for i := 0; i < tq; i++ {
		for j := 0; j < tk; j++ {
			if j > i+tk-tq {
				m[i*tk+j] = 1
			}
		}
	}
	return m
}

// padMask is a [2, 1, 1, 5] padding mask: batch 0 hides its last two keys, batch 1 hides all
// of them (a fully masked row).
var padMask = []int64{0, 0, 0, 1, 1, 1, 1, 1, 1, 1}

func one(xs []*tensor.Tensor) *tensor.Tensor { return xs[0] }

func gradCases() []gradCase {
	mm := func(ta, tb bool) func(xs []*tensor.Tensor) *tensor.Tensor {
		return func(xs []*tensor.Tensor) *tensor.Tensor { return tensor.MatMulT(xs[0], xs[1], ta, tb) }
	}
	bin := func(op func(a, b *tensor.Tensor) *tensor.Tensor) func(xs []*tensor.Tensor) *tensor.Tensor {
		return func(xs []*tensor.Tensor) *tensor.Tensor { return op(xs[0], xs[1]) }
	}
	un := func(op func(*tensor.Tensor) *tensor.Tensor) func(xs []*tensor.Tensor) *tensor.Tensor {
		return func(xs []*tensor.Tensor) *tensor.Tensor { return op(xs[0]) }
	}
	softmax := func(log bool, o func(x *tensor.Tensor) tensor.SoftmaxOptions, hide func(x *tensor.Tensor) *tensor.Tensor) func(xs []*tensor.Tensor) *tensor.Tensor {
		return func(xs []*tensor.Tensor) *tensor.Tensor {
			opts := o(xs[0])
			if !log {
				return tensor.Softmax(xs[0], opts)
			}
			y := tensor.LogSoftmax(xs[0], opts)
			if hide != nil { // masked positions are −∞: replace them so Σ y·R is finite
				y = tensor.MaskedFill(y, hide(xs[0]), 0)
			}
			return y
		}
	}
	causal := func(tq, tk int) func(x *tensor.Tensor) *tensor.Tensor {
		return func(x *tensor.Tensor) *tensor.Tensor { return ids(x, causalMaskI64(tq, tk), tq, tk) }
	}
	pad := func(x *tensor.Tensor) *tensor.Tensor { return ids(x, padMask, 2, 1, 1, 5) }
	padCausal := func(x *tensor.Tensor) *tensor.Tensor {
		return tensor.Add(pad(x), ids(x, causalMaskI64(4, 5), 4, 5))
	}
	ce := func(o tensor.CrossEntropyOptions, tgt []int64, tshape ...int) func(xs []*tensor.Tensor) *tensor.Tensor {
		return func(xs []*tensor.Tensor) *tensor.Tensor {
			return tensor.CrossEntropy(xs[0], ids(xs[0], tgt, tshape...), o)
		}
	}
	castTol := gradTol{h: 1e-3, rtol: 1e-4, atol: 1e-7} // fd of float32 rounding: error ≤ ulp32/h ≈ 6e-5

	var cases []gradCase
	add := func(name string, f func(xs []*tensor.Tensor) *tensor.Tensor, in ...gen) {
		cases = append(cases, gradCase{name: name, in: in, f: f})
	}

	// MatMul.
	add("MatMul/2d", mm(false, false), uni(-1, 1, 3, 4), uni(-1, 1, 4, 5))
	add("MatMul/2d_transA", mm(true, false), uni(-1, 1, 4, 3), uni(-1, 1, 4, 5))
	add("MatMul/2d_transB", mm(false, true), uni(-1, 1, 3, 4), uni(-1, 1, 5, 4))
	add("MatMul/2d_transAB", mm(true, true), uni(-1, 1, 4, 3), uni(-1, 1, 5, 4))
	add("MatMul/batched", mm(false, false), uni(-1, 1, 2, 3, 4), uni(-1, 1, 2, 4, 5))
	add("MatMul/batched_transA", mm(true, false), uni(-1, 1, 2, 4, 3), uni(-1, 1, 2, 4, 5))
	add("MatMul/batched_transB", mm(false, true), uni(-1, 1, 2, 3, 4), uni(-1, 1, 2, 5, 4))
	add("MatMul/batched_transAB", mm(true, true), uni(-1, 1, 2, 4, 3), uni(-1, 1, 2, 5, 4))
	add("MatMul/4d_batched", mm(false, true), uni(-1, 1, 2, 2, 3, 4), uni(-1, 1, 2, 2, 3, 4))
	add("MatMul/shared_weight_BTC_x_CO", mm(false, false), uni(-1, 1, 2, 3, 4), uni(-1, 1, 4, 5))
	add("MatMul/shared_weight_transB", mm(false, true), uni(-1, 1, 2, 3, 4), uni(-1, 1, 5, 4))
	add("MatMul/shared_weight_transA", mm(true, false), uni(-1, 1, 2, 4, 3), uni(-1, 1, 4, 5))
	add("MatMul/shared_weight_transAB", mm(true, true), uni(-1, 1, 2, 4, 3), uni(-1, 1, 5, 4))
	add("MatMul/2d_x_batched", mm(false, false), uni(-1, 1, 3, 4), uni(-1, 1, 2, 4, 5))
	add("MatMul/2d_x_batched_transA", mm(true, false), uni(-1, 1, 4, 3), uni(-1, 1, 2, 4, 5))
	add("MatMul/2d_x_batched_transB", mm(false, true), uni(-1, 1, 3, 4), uni(-1, 1, 2, 5, 4))
	add("MatMul/2d_x_batched_transAB", mm(true, true), uni(-1, 1, 4, 3), uni(-1, 1, 2, 5, 4))
	add("MatMul/same_operand_twice", func(xs []*tensor.Tensor) *tensor.Tensor {
		return tensor.MatMulT(xs[0], xs[0], false, true)
	}, uni(-1, 1, 3, 4))

	// Broadcasting binary ops.
	add("Add/same_shape", bin(tensor.Add), uni(-1, 1, 2, 3), uni(-1, 1, 2, 3))
	add("Add/[2,3,4]+[4]", bin(tensor.Add), uni(-1, 1, 2, 3, 4), uni(-1, 1, 4))
	add("Add/[4]+[2,3,4]", bin(tensor.Add), uni(-1, 1, 4), uni(-1, 1, 2, 3, 4))
	add("Sub/[2,3,4]-[3,1]", bin(tensor.Sub), uni(-1, 1, 2, 3, 4), uni(-1, 1, 3, 1))
	add("Sub/scalar-[2,3]", bin(tensor.Sub), uni(-1, 1), uni(-1, 1, 2, 3))
	add("Mul/[2,1,4]*[3,1]", bin(tensor.Mul), uni(-1, 1, 2, 1, 4), uni(-1, 1, 3, 1))
	add("Mul/[2,3]*scalar", bin(tensor.Mul), uni(-1, 1, 2, 3), uni(-1, 1))
	add("Mul/scalar*scalar", bin(tensor.Mul), uni(-1, 1), uni(-1, 1))
	add("Mul/x*x", func(xs []*tensor.Tensor) *tensor.Tensor { return tensor.Mul(xs[0], xs[0]) }, uni(-1, 1, 2, 3))
	add("Div/[3,1]/[1,4]", bin(tensor.Div), uni(-1, 1, 3, 1), uni(0.5, 2, 1, 4))
	add("Div/[2,3]/scalar", bin(tensor.Div), uni(-1, 1, 2, 3), uni(0.5, 2))
	add("Div/[2,3,4]/[2,1,1]", bin(tensor.Div), uni(-1, 1, 2, 3, 4), uni(-2, -0.5, 2, 1, 1))

	// Scalar-parameter and elementwise ops.
	add("AddScalar", un(func(x *tensor.Tensor) *tensor.Tensor { return tensor.AddScalar(x, 0.7) }), uni(-1, 1, 2, 3))
	add("Scale", un(func(x *tensor.Tensor) *tensor.Tensor { return tensor.Scale(x, -1.3) }), uni(-1, 1, 2, 3))
	add("Pow/2.5", un(func(x *tensor.Tensor) *tensor.Tensor { return tensor.Pow(x, 2.5) }), uni(0.5, 2, 2, 3))
	add("Pow/-1.5", un(func(x *tensor.Tensor) *tensor.Tensor { return tensor.Pow(x, -1.5) }), uni(0.5, 2, 2, 3))
	add("Pow/3_negative_base", un(func(x *tensor.Tensor) *tensor.Tensor { return tensor.Pow(x, 3) }), uni(-2, 2, 2, 3))
	add("Neg", un(tensor.Neg), uni(-1, 1, 2, 3))
	add("Exp", un(tensor.Exp), uni(-2, 2, 2, 3))
	add("Log", un(tensor.Log), uni(0.3, 3, 2, 3))
	add("Sqrt", un(tensor.Sqrt), uni(0.3, 3, 2, 3))
	add("Tanh", un(tensor.Tanh), uni(-2, 2, 2, 3))
	add("Sigmoid", un(tensor.Sigmoid), uni(-3, 3, 2, 3))
	add("GeLU", un(tensor.GeLU), uni(-3, 3, 3, 4))
	add("GeLUErf", un(tensor.GeLUErf), uni(-3, 3, 3, 4))
	add("SiLU", un(tensor.SiLU), uni(-3, 3, 3, 4))
	add("ReLU", un(tensor.ReLU), away(3, 4))

	// Reductions.
	add("Sum/all", un(func(x *tensor.Tensor) *tensor.Tensor { return tensor.Sum(x) }), uni(-1, 1, 2, 3, 4))
	add("Sum/dim1", un(func(x *tensor.Tensor) *tensor.Tensor { return tensor.Sum(x, 1) }), uni(-1, 1, 2, 3, 4))
	add("Sum/dim-1", un(func(x *tensor.Tensor) *tensor.Tensor { return tensor.Sum(x, -1) }), uni(-1, 1, 2, 3, 4))
	add("Sum/dims0,2", un(func(x *tensor.Tensor) *tensor.Tensor { return tensor.Sum(x, 2, 0) }), uni(-1, 1, 2, 3, 4))
	add("Sum/scalar", un(func(x *tensor.Tensor) *tensor.Tensor { return tensor.Sum(x) }), uni(-1, 1))
	add("SumKeepDim/dim1", un(func(x *tensor.Tensor) *tensor.Tensor { return tensor.SumKeepDim(x, 1) }), uni(-1, 1, 2, 3, 4))
	add("SumKeepDim/dims0,2", un(func(x *tensor.Tensor) *tensor.Tensor { return tensor.SumKeepDim(x, 0, 2) }), uni(-1, 1, 2, 3, 4))
	add("Mean/all", un(func(x *tensor.Tensor) *tensor.Tensor { return tensor.Mean(x) }), uni(-1, 1, 2, 3, 4))
	add("Mean/dim0", un(func(x *tensor.Tensor) *tensor.Tensor { return tensor.Mean(x, 0) }), uni(-1, 1, 2, 3, 4))
	add("Mean/dims1,2", un(func(x *tensor.Tensor) *tensor.Tensor { return tensor.Mean(x, 1, 2) }), uni(-1, 1, 2, 3, 4))
	add("MeanKeepDim/dim-1", un(func(x *tensor.Tensor) *tensor.Tensor { return tensor.MeanKeepDim(x, -1) }), uni(-1, 1, 2, 3, 4))
	add("MeanKeepDim/all", un(func(x *tensor.Tensor) *tensor.Tensor { return tensor.MeanKeepDim(x) }), uni(-1, 1, 2, 3, 4))
	add("Max/dim1", un(func(x *tensor.Tensor) *tensor.Tensor { v, _ := tensor.Max(x, 1); return v }), distinct(2, 5, 3))
	add("Max/dim-1", un(func(x *tensor.Tensor) *tensor.Tensor { v, _ := tensor.Max(x, -1); return v }), distinct(3, 4))
	add("Max/1d", un(func(x *tensor.Tensor) *tensor.Tensor { v, _ := tensor.Max(x, 0); return v }), distinct(6))

	// Softmax and LogSoftmax.
	plain := func(*tensor.Tensor) tensor.SoftmaxOptions { return tensor.SoftmaxOptions{} }
	scaled := func(*tensor.Tensor) tensor.SoftmaxOptions { return tensor.SoftmaxOptions{Scale: 0.7} }
	causalOpt := func(*tensor.Tensor) tensor.SoftmaxOptions { return tensor.SoftmaxOptions{Causal: true, Scale: 1.3} }
	padOpt := func(x *tensor.Tensor) tensor.SoftmaxOptions {
		return tensor.SoftmaxOptions{Mask: pad(x), Scale: 0.5}
	}
	padCausalOpt := func(x *tensor.Tensor) tensor.SoftmaxOptions {
		return tensor.SoftmaxOptions{Mask: pad(x), Causal: true}
	}
	for _, log := range []bool{false, true} {
		name := "Softmax"
		if log {
			name = "LogSoftmax"
		}
		add(name+"/plain", softmax(log, plain, nil), uni(-2, 2, 3, 5))
		add(name+"/1d", softmax(log, plain, nil), uni(-2, 2, 5))
		add(name+"/scale", softmax(log, scaled, nil), uni(-2, 2, 2, 3, 5))
		add(name+"/causal_square", softmax(log, causalOpt, causal(4, 4)), uni(-2, 2, 2, 4, 4))
		add(name+"/causal_Tq<Tk", softmax(log, causalOpt, causal(3, 5)), uni(-2, 2, 2, 3, 5))
		add(name+"/causal_Tq>Tk", softmax(log, causalOpt, causal(5, 3)), uni(-2, 2, 5, 3))
		add(name+"/pad_mask_[B,1,1,Tk]", softmax(log, padOpt, pad), uni(-2, 2, 2, 3, 4, 5))
		add(name+"/pad_mask_and_causal", softmax(log, padCausalOpt, padCausal), uni(-2, 2, 2, 3, 4, 5))
	}

	// Normalizations.
	add("LayerNorm/w_b", func(xs []*tensor.Tensor) *tensor.Tensor { return tensor.LayerNorm(xs[0], xs[1], xs[2], 1e-5) },
		uni(-2, 2, 2, 3, 5), uni(0.5, 1.5, 5), uni(-1, 1, 5))
	add("LayerNorm/no_w_b", func(xs []*tensor.Tensor) *tensor.Tensor { return tensor.LayerNorm(xs[0], nil, nil, 1e-5) },
		uni(-2, 2, 4, 5))
	add("LayerNorm/w_only", func(xs []*tensor.Tensor) *tensor.Tensor { return tensor.LayerNorm(xs[0], xs[1], nil, 1e-5) },
		uni(-2, 2, 4, 5), uni(0.5, 1.5, 5))
	add("LayerNorm/b_only", func(xs []*tensor.Tensor) *tensor.Tensor { return tensor.LayerNorm(xs[0], nil, xs[1], 1e-5) },
		uni(-2, 2, 4, 5), uni(-1, 1, 5))
	add("LayerNorm/large_eps", func(xs []*tensor.Tensor) *tensor.Tensor { return tensor.LayerNorm(xs[0], xs[1], xs[2], 0.5) },
		uni(-2, 2, 3, 4), uni(0.5, 1.5, 4), uni(-1, 1, 4))
	add("RMSNorm/w", func(xs []*tensor.Tensor) *tensor.Tensor { return tensor.RMSNorm(xs[0], xs[1], 1e-6) },
		uni(-2, 2, 2, 3, 5), uni(0.5, 1.5, 5))
	add("RMSNorm/no_w", func(xs []*tensor.Tensor) *tensor.Tensor { return tensor.RMSNorm(xs[0], nil, 1e-6) },
		uni(-2, 2, 4, 5))
	add("RMSNorm/large_eps", func(xs []*tensor.Tensor) *tensor.Tensor { return tensor.RMSNorm(xs[0], xs[1], 0.5) },
		uni(-2, 2, 3, 4), uni(0.5, 1.5, 4))

	// Embedding and losses.
	add("Embedding/repeated_ids", func(xs []*tensor.Tensor) *tensor.Tensor {
		return tensor.Embedding(xs[0], ids(xs[0], []int64{1, 3, 1, 0, 3, 3}, 2, 3))
	}, uni(-1, 1, 5, 4))
	add("Embedding/int32_ids", func(xs []*tensor.Tensor) *tensor.Tensor {
		return tensor.Embedding(xs[0], tensor.FromSlice(xs[0].Device(), []int32{4, 4, 2}))
	}, uni(-1, 1, 5, 3))
	tgt := []int64{0, 4, 2, 2}
	add("CrossEntropy/mean", ce(tensor.CrossEntropyOptions{}, tgt, 4), uni(-2, 2, 4, 5))
	add("CrossEntropy/sum", ce(tensor.CrossEntropyOptions{Reduction: tensor.ReduceSumLoss}, tgt, 4), uni(-2, 2, 4, 5))
	add("CrossEntropy/none", ce(tensor.CrossEntropyOptions{Reduction: tensor.ReduceNone}, tgt, 4), uni(-2, 2, 4, 5))
	ign := []int64{3, -100, 1, -100}
	add("CrossEntropy/ignore_mean", ce(tensor.CrossEntropyOptions{Ignore: true, IgnoreIndex: -100}, ign, 4), uni(-2, 2, 4, 5))
	add("CrossEntropy/ignore_sum", ce(tensor.CrossEntropyOptions{Ignore: true, IgnoreIndex: -100, Reduction: tensor.ReduceSumLoss}, ign, 4), uni(-2, 2, 4, 5))
	add("CrossEntropy/ignore_in_range_index", ce(tensor.CrossEntropyOptions{Ignore: true, IgnoreIndex: 2}, tgt, 4), uni(-2, 2, 4, 5))
	add("CrossEntropy/all_ignored", ce(tensor.CrossEntropyOptions{Ignore: true, IgnoreIndex: -100}, []int64{-100, -100}, 2), uni(-2, 2, 2, 5))
	add("CrossEntropy/label_smoothing", ce(tensor.CrossEntropyOptions{LabelSmoothing: 0.1}, tgt, 4), uni(-2, 2, 4, 5))
	add("CrossEntropy/label_smoothing_ignore_none", ce(tensor.CrossEntropyOptions{LabelSmoothing: 0.25, Ignore: true, IgnoreIndex: -100, Reduction: tensor.ReduceNone}, ign, 4), uni(-2, 2, 4, 5))
	add("CrossEntropy/3d_logits", ce(tensor.CrossEntropyOptions{LabelSmoothing: 0.1}, []int64{0, 1, 2, 3, 4, 0}, 2, 3), uni(-2, 2, 2, 3, 5))
	add("CrossEntropy/3d_logits_none", ce(tensor.CrossEntropyOptions{Reduction: tensor.ReduceNone}, []int64{0, 1, 2, 3, 4, 0}, 2, 3), uni(-2, 2, 2, 3, 5))
	add("CrossEntropy/int32_targets", func(xs []*tensor.Tensor) *tensor.Tensor {
		return tensor.CrossEntropy(xs[0], tensor.FromSlice(xs[0].Device(), []int32{1, 0, 4}), tensor.CrossEntropyOptions{})
	}, uni(-2, 2, 3, 5))

	// Selection.
	add("Where/broadcast", func(xs []*tensor.Tensor) *tensor.Tensor {
		return tensor.Where(ids(xs[0], []int64{1, 0, 0, 1, 0, 1, 1, 0}, 2, 1, 4), xs[0], xs[1])
	}, uni(-1, 1, 2, 3, 4), uni(-1, 1, 4))
	add("Where/same_tensor", func(xs []*tensor.Tensor) *tensor.Tensor {
		return tensor.Where(ids(xs[0], []int64{1, 0, 1}, 3), xs[0], tensor.Scale(xs[0], 2))
	}, uni(-1, 1, 2, 3))
	add("MaskedFill", func(xs []*tensor.Tensor) *tensor.Tensor {
		return tensor.MaskedFill(xs[0], ids(xs[0], []int64{0, 1, 0}, 3, 1), -7)
	}, uni(-1, 1, 2, 3, 4))
	add("Gather/dim1_repeats", func(xs []*tensor.Tensor) *tensor.Tensor {
		return tensor.Gather(xs[0], 1, ids(xs[0], []int64{0, 4, 4, 1, 2, 2, 2, 0, 3, 1, 0, 3}, 3, 4))
	}, uni(-1, 1, 3, 5))
	add("Gather/dim0", func(xs []*tensor.Tensor) *tensor.Tensor {
		return tensor.Gather(xs[0], 0, tensor.FromSlice(xs[0].Device(), []int32{2, 0, 1, 1, 1, 2}, 2, 3))
	}, uni(-1, 1, 3, 3))
	add("Dropout/fixed_rng", func(xs []*tensor.Tensor) *tensor.Tensor {
		return tensor.Dropout(xs[0], 0.3, tensor.NewRNG(7).Named("dropout"))
	}, uni(-1, 1, 4, 5))
	add("DropoutRegion", func(xs []*tensor.Tensor) *tensor.Tensor {
		return tensor.DropoutRegion(xs[0], 0.5, tensor.NewRNG(8), tensor.Shape{4, 10}, []int{1, 3})
	}, uni(-1, 1, 3, 5))

	// Views and rearrangements.
	add("Reshape", un(func(x *tensor.Tensor) *tensor.Tensor { return tensor.Exp(x.Reshape(3, -1)) }), uni(-1, 1, 2, 3, 2))
	add("Unsqueeze_Squeeze", un(func(x *tensor.Tensor) *tensor.Tensor {
		return tensor.Mul(x.Unsqueeze(1), x.Unsqueeze(-1).Squeeze(-1).Unsqueeze(0)).Unsqueeze(1).Squeeze(1) // [3, 3]
	}), uni(-1, 1, 3))
	add("Permute", un(func(x *tensor.Tensor) *tensor.Tensor { return x.Permute(2, 0, 1) }), uni(-1, 1, 2, 3, 4))
	add("Permute/negative_dims", un(func(x *tensor.Tensor) *tensor.Tensor { return x.Permute(-1, 1, 0, 2) }), uni(-1, 1, 2, 3, 2, 2))
	add("Transpose", un(func(x *tensor.Tensor) *tensor.Tensor { return x.Transpose(0, 2) }), uni(-1, 1, 2, 3, 4))
	add("Transpose/last_two", un(func(x *tensor.Tensor) *tensor.Tensor { return tensor.Mul(x.Transpose(-1, -2), x.Transpose(1, 2)) }), uni(-1, 1, 2, 3, 3))
	add("Narrow/view_dim0", un(func(x *tensor.Tensor) *tensor.Tensor { return x.Narrow(0, 1, 2) }), uni(-1, 1, 4, 3))
	add("Narrow/view_after_size1_dims", un(func(x *tensor.Tensor) *tensor.Tensor { return x.Narrow(2, 1, 3) }), uni(-1, 1, 1, 1, 5, 2))
	add("Narrow/copy_inner_dim", un(func(x *tensor.Tensor) *tensor.Tensor { return x.Narrow(1, 2, 3) }), uni(-1, 1, 3, 6, 2))
	add("Narrow/copy_last_dim", un(func(x *tensor.Tensor) *tensor.Tensor { return x.Narrow(-1, 0, 2) }), uni(-1, 1, 3, 4))
	add("Narrow/overlapping_twice", un(func(x *tensor.Tensor) *tensor.Tensor {
		return tensor.Mul(x.Narrow(1, 0, 3), x.Narrow(1, 1, 3))
	}), uni(-1, 1, 2, 4))
	add("Concat/dim0", func(xs []*tensor.Tensor) *tensor.Tensor { return tensor.Concat(0, xs[0], xs[1], xs[2]) },
		uni(-1, 1, 1, 3), uni(-1, 1, 2, 3), uni(-1, 1, 3, 3))
	add("Concat/dim1", func(xs []*tensor.Tensor) *tensor.Tensor { return tensor.Concat(1, xs[0], xs[1]) },
		uni(-1, 1, 2, 1, 2), uni(-1, 1, 2, 3, 2))
	add("Concat/dim-1_same_tensor_twice", func(xs []*tensor.Tensor) *tensor.Tensor { return tensor.Concat(-1, xs[0], tensor.Exp(xs[0]), xs[0]) },
		uni(-1, 1, 2, 2))
	add("Split", un(func(x *tensor.Tensor) *tensor.Tensor {
		p := tensor.Split(x, 1, 2, 1, 3)
		return tensor.Concat(1, tensor.Exp(p[2]), p[0], tensor.Scale(p[1], 3), tensor.Mul(p[0], p[0]))
	}), uni(-1, 1, 2, 6))
	add("Split/dim0_part_unused", un(func(x *tensor.Tensor) *tensor.Tensor {
		p := tensor.Split(x, 0, 1, 2)
		return tensor.Tanh(p[1])
	}), uni(-1, 1, 3, 2))
	add("Chunk", un(func(x *tensor.Tensor) *tensor.Tensor {
		p := tensor.Chunk(x, 3, -1)
		return tensor.Add(tensor.Mul(p[0], p[1]), tensor.Sigmoid(p[2]))
	}), uni(-1, 1, 2, 6))
	cases = append(cases, gradCase{name: "Cast/F64_F32_F64", tol: &castTol, in: []gen{uni(-1, 1, 2, 3)},
		f: un(func(x *tensor.Tensor) *tensor.Tensor { return x.Cast(tensor.F32).Cast(tensor.F64) })})
	add("Clone", un(func(x *tensor.Tensor) *tensor.Tensor { return tensor.Mul(x.Clone(), x) }), uni(-1, 1, 2, 3))
	add("Expand/[3,1]_to_[2,3,4]", un(func(x *tensor.Tensor) *tensor.Tensor { return x.Expand(2, 3, 4) }), uni(-1, 1, 3, 1))
	add("Expand/scalar", un(func(x *tensor.Tensor) *tensor.Tensor { return x.Expand(2, 2) }), uni(-1, 1))

	// Kernels reading views that start inside their storage (Narrow along dim 0).
	add("ops_on_offset_views", un(func(x *tensor.Tensor) *tensor.Tensor {
		a := x.Narrow(0, 1, 2)               // [2, 6], a view at offset 6
		b := x.Narrow(0, 3, 1).Reshape(6, 1) // [6, 1], a view at offset 18
		v, _ := tensor.Max(a, 1)
		parts := []*tensor.Tensor{
			tensor.Softmax(a, tensor.SoftmaxOptions{Scale: 0.5}),
			tensor.LogSoftmax(a, tensor.SoftmaxOptions{}), tensor.Softmax(a, tensor.SoftmaxOptions{Causal: true}),
			tensor.LayerNorm(a, nil, nil, 1e-5),
			tensor.RMSNorm(a, nil, 1e-5),
			tensor.MatMul(a, b),
			tensor.MatMulT(b, a, true, true),
			tensor.CrossEntropy(a, ids(x, []int64{1, 5}, 2), tensor.CrossEntropyOptions{Reduction: tensor.ReduceNone}),
			tensor.Embedding(x.Narrow(0, 2, 2), ids(x, []int64{1, 0, 1}, 3)),
			tensor.Gather(a, 1, ids(x, []int64{5, 0, 2, 2}, 2, 2)),
			a.Permute(1, 0), a.Narrow(1, 1, 3), tensor.Exp(a), tensor.Mul(a, b.Reshape(6)), v,
			tensor.Sum(a, 0), tensor.Where(ids(x, []int64{1, 0, 1, 0, 1, 0}, 6), a, b.Reshape(6)),
			a.Expand(2, 2, 6), tensor.Concat(0, b, a.Reshape(12, 1)),
		}
		for i, p := range parts {
			parts[i] = p.Reshape(-1)
		}
		return tensor.Concat(0, parts...)
	}), uni(-1, 1, 4, 6))

	// Compositions.
	add("attention", func(xs []*tensor.Tensor) *tensor.Tensor {
		s := tensor.MatMulT(xs[0], xs[1], false, true) // [B, T, T]
		p := tensor.Softmax(s, tensor.SoftmaxOptions{Causal: true, Scale: 0.5})
		return tensor.MatMul(p, xs[2])
	}, uni(-1, 1, 2, 3, 4), uni(-1, 1, 2, 3, 4), uni(-1, 1, 2, 3, 4))
	add("mlp_loss", func(xs []*tensor.Tensor) *tensor.Tensor {
		h := tensor.GeLU(tensor.Add(tensor.MatMul(xs[0], xs[1]), xs[2]))
		h = tensor.LayerNorm(h, nil, nil, 1e-5)
		return tensor.CrossEntropy(h, ids(xs[0], []int64{0, 3, 1, 2, 2, 0}, 2, 3), tensor.CrossEntropyOptions{LabelSmoothing: 0.1})
	}, uni(-1, 1, 2, 3, 4), uni(-1, 1, 4, 4), uni(-0.5, 0.5, 4))
	return cases
}

// inputsFor draws the values of a case's inputs as F64 tensors.
func inputsFor(dev *tensor.Device, c gradCase, seed uint64) []*tensor.Tensor {
	r := rand.New(rand.NewPCG(seed, 99))
	xs := make([]*tensor.Tensor, len(c.in))
	for i, g := range c.in {
		n := tensor.Shape(g.shape).Numel()
		xs[i] = fromF64(dev, g.fill(r, n), g.shape...)
	}
	return xs
}

func TestGradCheck(t *testing.T) {
	dev := tensor.NewCPU()
	for ci, c := range gradCases() {
		t.Run(c.name, func(t *testing.T) {
			tol := tightGrad
			if c.tol != nil {
				tol = *c.tol
			}
			gradCheckTol(t, tol, c.f, inputsFor(dev, c, uint64(ci))...)
		})
	}
}

// TestGradLowPrecisionMatchesF64 runs every gradient case in F32, F16 and BF16 and checks
// outputs and gradients against an F64 run on the same (rounded) inputs.
func TestGradLowPrecisionMatchesF64(t *testing.T) {
	dev := tensor.NewCPU()
	// Each op computes in float32 and rounds its result to the dtype once, so errors are a
	// few roundings (unit roundoff u: 6e-8, 4.9e-4, 3.9e-3) per op of a case, relative to
	// the values' scale; the compositions chain up to ~6 ops.
	dtypes := []struct {
		dt  tensor.DType
		tol float64
	}{{tensor.F32, 2e-6}, {tensor.F16, 1e-2}, {tensor.BF16, 6e-2}}
	for _, d := range dtypes {
		for ci, c := range gradCases() {
			t.Run(d.dt.String()+"/"+c.name, func(t *testing.T) {
				in := inputsFor(dev, c, uint64(ci))
				x64 := make([]*tensor.Tensor, len(in))
				xlo := make([]*tensor.Tensor, len(in))
				for i, x := range in {
					xlo[i] = x.Cast(d.dt).SetRequiresGrad(true)
					x64[i] = xlo[i].Detach().Cast(tensor.F64).SetRequiresGrad(true)
				}
				y64, ylo := c.f(x64), c.f(xlo)
				require.Equal(t, y64.Shape(), ylo.Shape())
				r := make([]float64, y64.Numel())
				for k := range r {
					r[k] = math.Sin(float64(k) + 1)
				}
				rlo := fromF64(dev, r, ylo.Shape()...).Cast(ylo.DType())
				y64.BackwardWithGrad(rlo.Cast(tensor.F64))
				ylo.BackwardWithGrad(rlo)
				requireCloseScaled(t, tensor.ToSlice[float64](y64), tensor.ToSlice[float64](ylo), d.tol, "output")
				for i := range x64 {
					if x64[i].Grad() == nil {
						require.Nil(t, xlo[i].Grad(), "input %d", i)
						continue
					}
					require.Equal(t, d.dt, xlo[i].Grad().DType())
					requireCloseScaled(t, tensor.ToSlice[float64](x64[i].Grad()), tensor.ToSlice[float64](xlo[i].Grad()), d.tol,
						fmt.Sprintf("grad of input %d", i))
				}
			})
		}
	}
}

// requireCloseScaled checks |got − want| ≤ tol·max(1, max|want|) elementwise.
func requireCloseScaled(t *testing.T, want, got []float64, tol float64, what string) {
	t.Helper()
	require.Len(t, got, len(want), what)
	scale := 1.0
	for _, w := range want {
		if !math.IsInf(w, 0) {
			scale = max(scale, math.Abs(w))
		}
	}
	for i := range want {
		if want[i] == got[i] { // also equal infinities
			continue
		}
		require.LessOrEqual(t, math.Abs(got[i]-want[i]), tol*scale, "%s element %d: got %v want %v", what, i, got[i], want[i])
	}
}
