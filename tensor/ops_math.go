package tensor

import (
	"fmt"
	"slices"
)

func checkSame(op string, a, b *Tensor) {
	if a.Device() != b.Device() {
		panic(fmt.Sprintf("tensor: %s: operands on different devices (%v, %v)", op, a.Device(), b.Device()))
	}
	if a.dtype != b.dtype {
		panic(fmt.Sprintf("tensor: %s: %v %v and %v %v: dtypes differ", op, a.dtype, a.shape, b.dtype, b.shape))
	}
}

func binary(op BinaryOp, name string, a, b *Tensor) *Tensor {
	checkSame(name, a, b)
	shape, ok := Broadcast(a.shape, b.shape)
	if !ok {
		panic(fmt.Sprintf("tensor: %s: %v and %v do not broadcast", name, a.shape, b.shape))
	}
	out := empty(a.Device(), a.dtype, shape)
	a.Device().backend.Binary(op, out.Span(), a.Span(), b.Span())
	return record1(name, out, []*Tensor{a, b}, func(gy *Tensor) []*Tensor {
		var ga, gb *Tensor
		switch op {
		case OpAdd:
			ga, gb = gy, gy
		case OpSub:
			ga, gb = gy, Neg(gy)
		case OpMul:
			ga, gb = Mul(gy, b), Mul(gy, a)
		case OpDiv:
			ga = Div(gy, b)
			gb = Neg(Div(Mul(gy, a), Mul(b, b)))
		}
		if needsGrad(a) {
			ga = sumTo(ga, a.shape)
		} else {
			ga = nil
		}
		if needsGrad(b) {
			gb = sumTo(gb, b.shape)
		} else {
			gb = nil
		}
		return []*Tensor{ga, gb}
	})
}

// Add returns a + b with NumPy broadcasting. It panics if the shapes do not broadcast or
// the dtypes or devices differ.
func Add(a, b *Tensor) *Tensor { return binary(OpAdd, "Add", a, b) }

// Sub returns a − b with NumPy broadcasting.
func Sub(a, b *Tensor) *Tensor { return binary(OpSub, "Sub", a, b) }

// Mul returns a · b elementwise with NumPy broadcasting.
func Mul(a, b *Tensor) *Tensor { return binary(OpMul, "Mul", a, b) }

// Div returns a / b elementwise with NumPy broadcasting.
func Div(a, b *Tensor) *Tensor { return binary(OpDiv, "Div", a, b) }

func unary(op UnaryOp, name string, x *Tensor, p float64) *Tensor {
	out := empty(x.Device(), x.dtype, x.shape)
	x.Device().backend.Unary(op, out.Span(), x.Span(), p)
	return record1(name, out, []*Tensor{x}, func(gy *Tensor) []*Tensor {
		dx := empty(gy.Device(), x.dtype, x.shape)
		gy.Device().backend.UnaryBackward(op, dx.Span(), x.Span(), out.Span(), gy.Span(), p)
		return []*Tensor{dx}
	})
}

// Neg returns −x.
func Neg(x *Tensor) *Tensor { return unary(OpNeg, "Neg", x, 0) }

// Exp returns eˣ elementwise.
func Exp(x *Tensor) *Tensor { return unary(OpExp, "Exp", x, 0) }

// Log returns the natural logarithm elementwise.
func Log(x *Tensor) *Tensor { return unary(OpLog, "Log", x, 0) }

// Sqrt returns the square root elementwise.
func Sqrt(x *Tensor) *Tensor { return unary(OpSqrt, "Sqrt", x, 0) }

// Tanh returns the hyperbolic tangent elementwise.
func Tanh(x *Tensor) *Tensor { return unary(OpTanh, "Tanh", x, 0) }

// Sigmoid returns 1/(1+e⁻ˣ) elementwise.
func Sigmoid(x *Tensor) *Tensor { return unary(OpSigmoid, "Sigmoid", x, 0) }

// GeLU returns the tanh approximation of GeLU used by GPT-2 and Megatron:
// 0.5x(1+tanh(√(2/π)(x+0.044715x³))).
func GeLU(x *Tensor) *Tensor { return unary(OpGeLUTanh, "GeLU", x, 0) }

// GeLUErf returns the exact GeLU used by BERT: 0.5x(1+erf(x/√2)).
func GeLUErf(x *Tensor) *Tensor { return unary(OpGeLUErf, "GeLUErf", x, 0) }

// SiLU returns x·σ(x) (Swish), the gate of SwiGLU.
func SiLU(x *Tensor) *Tensor { return unary(OpSiLU, "SiLU", x, 0) }

// ReLU returns max(x, 0); its gradient at 0 is 0, as in PyTorch.
func ReLU(x *Tensor) *Tensor { return unary(OpReLU, "ReLU", x, 0) }

// AddScalar returns x + c.
func AddScalar(x *Tensor, c float64) *Tensor { return unary(OpAddScalar, "AddScalar", x, c) }

// Scale returns x · c.
func Scale(x *Tensor, c float64) *Tensor { return unary(OpMulScalar, "Scale", x, c) }

// Pow returns xᶜ elementwise.
func Pow(x *Tensor, c float64) *Tensor { return unary(OpPowScalar, "Pow", x, c) }

// reduceDims normalizes and sorts dims (all dims when none are given).
func reduceDims(op string, t *Tensor, dims []int) []int {
	if len(dims) == 0 {
		dims = make([]int, len(t.shape))
		for i := range dims {
			dims[i] = i
		}
	}
	out := make([]int, len(dims))
	for i, d := range dims {
		out[i] = normDim(op, d, len(t.shape))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func reduce(op ReduceOp, name string, t *Tensor, keepDim bool, dims []int) *Tensor {
	ds := reduceDims(name, t, dims)
	kept := t.shape.Clone()
	for _, d := range ds {
		kept[d] = 1
	}
	var out *Tensor
	cur := t.Detach()
	if len(ds) == 0 {
		out = t.Clone().Detach()
	}
	for i := len(ds) - 1; i >= 0; i-- { // innermost first, so earlier dims keep their index
		d := ds[i]
		shape := slices.Delete(cur.shape.Clone(), d, d+1)
		next := empty(t.Device(), t.dtype, shape)
		t.Device().backend.Reduce(op, next.Span(), cur.Span(), d)
		if cur != t && i != len(ds)-1 {
			cur.Release()
		}
		cur, out = next, next
	}
	if keepDim {
		out = out.view(0, kept)
	}
	n := float64(t.Numel()) / float64(kept.Numel())
	in := t.shape
	return record1(name, out, []*Tensor{t}, func(gy *Tensor) []*Tensor {
		g := gy.Reshape(kept...).Expand(in...)
		if op == ReduceMean {
			g = Scale(g, 1/n)
		}
		return []*Tensor{g}
	})
}

// Sum returns the sum of t over dims (all dims when none are given), which are removed.
func Sum(t *Tensor, dims ...int) *Tensor { return reduce(ReduceSum, "Sum", t, false, dims) }

// SumKeepDim is Sum with the reduced dims kept with size 1.
func SumKeepDim(t *Tensor, dims ...int) *Tensor { return reduce(ReduceSum, "Sum", t, true, dims) }

// Mean returns the mean of t over dims (all dims when none are given), which are removed.
func Mean(t *Tensor, dims ...int) *Tensor { return reduce(ReduceMean, "Mean", t, false, dims) }

// MeanKeepDim is Mean with the reduced dims kept with size 1.
func MeanKeepDim(t *Tensor, dims ...int) *Tensor { return reduce(ReduceMean, "Mean", t, true, dims) }

// Max returns the maximum of t along dim (removed) and the I64 index of its first
// occurrence. The gradient flows to that position only, as in PyTorch's max(dim).
func Max(t *Tensor, dim int) (values, indices *Tensor) {
	d := normDim("Max", dim, len(t.shape))
	if t.shape[d] == 0 {
		panic(fmt.Sprintf("tensor: Max: dim %d of %v is empty", d, t.shape))
	}
	shape := slices.Delete(t.shape.Clone(), d, d+1)
	values = empty(t.Device(), t.dtype, shape)
	indices = empty(t.Device(), I64, shape)
	t.Device().backend.Max(values.Span(), indices.Span(), t.Span(), d)
	in := t.shape
	record1("Max", values, []*Tensor{t}, func(gy *Tensor) []*Tensor {
		g := Zeros(gy.Device(), gy.dtype, in...)
		gy.Device().backend.ScatterAdd(g.Span(), gy.Unsqueeze(d).Span(), indices.Unsqueeze(d).Span(), d)
		return []*Tensor{g}
	})
	return values, indices
}

// Gather picks, along dim, the elements of t at idx (I32 or I64): out[..i..] =
// t[..idx[..i..]..], as torch.gather. idx must have t's shape except at dim. The gradient
// is scattered back with addition. It panics if an index is out of range.
func Gather(t *Tensor, dim int, idx *Tensor) *Tensor {
	d := normDim("Gather", dim, len(t.shape))
	if len(idx.shape) != len(t.shape) || (idx.dtype != I32 && idx.dtype != I64) {
		panic(fmt.Sprintf("tensor: Gather: index %v %v for %v", idx.dtype, idx.shape, t.shape))
	}
	for i := range idx.shape {
		if i != d && idx.shape[i] != t.shape[i] {
			panic(fmt.Sprintf("tensor: Gather: index %v and input %v differ outside dim %d", idx.shape, t.shape, d))
		}
	}
	out := empty(t.Device(), t.dtype, idx.shape)
	t.Device().backend.Gather(out.Span(), t.Span(), idx.Span(), d)
	in := t.shape
	return record1("Gather", out, []*Tensor{t}, func(gy *Tensor) []*Tensor {
		g := Zeros(gy.Device(), gy.dtype, in...)
		gy.Device().backend.ScatterAdd(g.Span(), gy.Span(), idx.Span(), d)
		return []*Tensor{g}
	})
}
