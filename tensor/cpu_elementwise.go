package tensor

import "math"

const sqrt2OverPi = 0.7978845608028654 // √(2/π)

// unaryFn returns the scalar function of op.
func unaryFn(op UnaryOp, p float64) func(float64) float64 {
	switch op {
	case OpNeg:
		return func(x float64) float64 { return -x }
	case OpExp:
		return math.Exp
	case OpLog:
		return math.Log
	case OpSqrt:
		return math.Sqrt
	case OpTanh:
		return math.Tanh
	case OpGeLUTanh:
		return func(x float64) float64 { return 0.5 * x * (1 + math.Tanh(sqrt2OverPi*(x+0.044715*x*x*x))) }
	case OpGeLUErf:
		return func(x float64) float64 { return 0.5 * x * (1 + math.Erf(x/math.Sqrt2)) }
	case OpSiLU:
		return func(x float64) float64 { return x / (1 + math.Exp(-x)) }
	case OpReLU:
		return func(x float64) float64 { return max(x, 0) }
	case OpAddScalar:
		return func(x float64) float64 { return x + p }
	case OpMulScalar:
		return func(x float64) float64 { return x * p }
	case OpPowScalar:
		return func(x float64) float64 { return math.Pow(x, p) }
	case OpSigmoid:
		return func(x float64) float64 { return 1 / (1 + math.Exp(-x)) }
	}
	panic("tensor: unknown unary op")
}

// unaryGrad returns op'(x) (given y = op(x)).
func unaryGrad(op UnaryOp, p float64) func(x, y float64) float64 {
	switch op {
	case OpNeg:
		return func(x, y float64) float64 { return -1 }
	case OpExp:
		return func(x, y float64) float64 { return y }
	case OpLog:
		return func(x, y float64) float64 { return 1 / x }
	case OpSqrt:
		return func(x, y float64) float64 { return 0.5 / y }
	case OpTanh:
		return func(x, y float64) float64 { return 1 - y*y }
	case OpGeLUTanh:
		return func(x, y float64) float64 {
			t := math.Tanh(sqrt2OverPi * (x + 0.044715*x*x*x))
			return 0.5*(1+t) + 0.5*x*(1-t*t)*sqrt2OverPi*(1+3*0.044715*x*x)
		}
	case OpGeLUErf:
		return func(x, y float64) float64 {
			return 0.5*(1+math.Erf(x/math.Sqrt2)) + x*math.Exp(-0.5*x*x)/math.Sqrt(2*math.Pi)
		}
	case OpSiLU:
		return func(x, y float64) float64 {
			s := 1 / (1 + math.Exp(-x))
			return s * (1 + x*(1-s))
		}
	case OpReLU:
		return func(x, y float64) float64 {
			if x > 0 {
				return 1
			}
			return 0
		}
	case OpAddScalar:
		return func(x, y float64) float64 { return 1 }
	case OpMulScalar:
		return func(x, y float64) float64 { return p }
	case OpPowScalar:
		return func(x, y float64) float64 { return p * math.Pow(x, p-1) }
	case OpSigmoid:
		return func(x, y float64) float64 { return y * (1 - y) }
	}
	panic("tensor: unknown unary op")
}

func (cpuBackend) Unary(op UnaryOp, dst, x Span, p float64) {
	if computeIs64(dst.DType) {
		unaryKernel[float64](op, dst, x, p)
	} else {
		unaryKernel[float32](op, dst, x, p)
	}
}

func unaryKernel[T float](op UnaryOp, dst, x Span, p float64) {
	xs, ds := load[T](x), output[T](dst)
	if x32, ok := any(xs).([]float32); ok && unaryF32(op, any(ds).([]float32), x32, p) {
		store(dst, ds)
		return
	}
	f := unaryFn(op, p)
	parallelFor(len(ds), 1<<14, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			ds[i] = T(f(float64(xs[i])))
		}
	})
	store(dst, ds)
}

func (cpuBackend) UnaryBackward(op UnaryOp, dx, x, y, dy Span, p float64) {
	if computeIs64(dx.DType) {
		unaryBackwardKernel[float64](op, dx, x, y, dy, p)
	} else {
		unaryBackwardKernel[float32](op, dx, x, y, dy, p)
	}
}

func unaryBackwardKernel[T float](op UnaryOp, dx, x, y, dy Span, p float64) {
	xs, ys, dys, dxs := load[T](x), load[T](y), load[T](dy), output[T](dx)
	if dy32, ok := any(dys).([]float32); ok &&
		unaryBackwardF32(op, any(dxs).([]float32), any(xs).([]float32), any(ys).([]float32), dy32, p) {
		store(dx, dxs)
		return
	}
	g := unaryGrad(op, p)
	parallelFor(len(dxs), 1<<14, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			var xv, yv float64
			if xs != nil {
				xv = float64(xs[i])
			}
			if ys != nil {
				yv = float64(ys[i])
			}
			dxs[i] = T(float64(dys[i]) * g(xv, yv))
		}
	})
	store(dx, dxs)
}

// unaryGrain is the number of elements below which an elementwise loop stays on one
// goroutine.
const unaryGrain = 1 << 14

// unaryF32 runs the common ops on float32 data with a tight loop per op (the generic
// path's results: float64 arithmetic rounded once to float32, GeLU and Exp vectorised by
// vmath.go), splitting the elements across goroutines at multiples of vmathBlock. It
// reports false for ops it leaves to the generic path.
func unaryF32(op UnaryOp, d, x []float32, p float64) bool {
	var body func(d, x []float32)
	switch op {
	case OpGeLUTanh:
		body = geluTanh
	case OpExp:
		body = func(d, x []float32) { expAffine(d, x, 1, 1, 0, 0) }
	case OpNeg:
		body = func(d, x []float32) {
			for i, v := range x[:len(d)] {
				d[i] = -v
			}
		}
	case OpReLU:
		body = func(d, x []float32) {
			for i, v := range x[:len(d)] {
				d[i] = max(v, 0)
			}
		}
	case OpAddScalar:
		body = func(d, x []float32) {
			for i, v := range x[:len(d)] {
				d[i] = float32(float64(v) + p)
			}
		}
	case OpMulScalar:
		body = func(d, x []float32) {
			for i, v := range x[:len(d)] {
				d[i] = float32(float64(v) * p)
			}
		}
	default:
		return false
	}
	parallelBlocks(len(d), unaryGrain, func(lo, hi int) { body(d[lo:hi], x[lo:hi]) })
	return true
}

// unaryBackwardF32 is unaryF32 for UnaryBackward: dx = dy·op'(x). The products of two
// float32s are exact in float64, so float32 multiplies round them as the generic path does.
func unaryBackwardF32(op UnaryOp, dx, x, y, dy []float32, p float64) bool {
	var body func(lo, hi int)
	switch op {
	case OpGeLUTanh:
		body = func(lo, hi int) { geluTanhBackward(dx[lo:hi], x[lo:hi], dy[lo:hi]) }
	case OpExp:
		body = func(lo, hi int) {
			for i := lo; i < hi; i++ {
				dx[i] = dy[i] * y[i]
			}
		}
	case OpReLU:
		body = func(lo, hi int) {
			for i := lo; i < hi; i++ {
				g := float32(0)
				if x[i] > 0 {
					g = 1
				}
				dx[i] = dy[i] * g
			}
		}
	case OpAddScalar:
		body = func(lo, hi int) { copy(dx[lo:hi], dy[lo:hi]) }
	case OpMulScalar:
		body = func(lo, hi int) {
			for i := lo; i < hi; i++ {
				dx[i] = float32(float64(dy[i]) * p)
			}
		}
	default:
		return false
	}
	parallelBlocks(len(dx), unaryGrain, body)
	return true
}

func (cpuBackend) Binary(op BinaryOp, dst, a, b Span) {
	if computeIs64(dst.DType) {
		binaryKernel[float64](op, dst, a, b)
	} else {
		binaryKernel[float32](op, dst, a, b)
	}
}

func binaryKernel[T float](op BinaryOp, dst, a, b Span) {
	as, bs := load[T](a), load[T](b)
	ds := output[T](dst)
	if a.Shape.Equal(dst.Shape) && b.Shape.Equal(dst.Shape) {
		parallelFor(len(ds), 1<<15, func(lo, hi int) { binaryRow(op, ds[lo:hi], as[lo:hi], bs[lo:hi], 1, 1) })
		store(dst, ds)
		return
	}
	if n := dst.Shape[len(dst.Shape)-1]; len(dst.Shape) > 0 && n > 0 && a.Shape.Equal(dst.Shape) && isRowVector(b.Shape, dst.Shape) {
		// x + bias: rows of a against one row of b, split by rows.
		parallelFor(len(ds)/n, max(1, (1<<15)/n), func(lo, hi int) {
			for r := lo; r < hi; r++ {
				binaryRow(op, ds[r*n:(r+1)*n], as[r*n:(r+1)*n], bs, 1, 1)
			}
		})
		store(dst, ds)
		return
	}
	forEachRow(dst.Shape, [][]int{BroadcastStrides(a.Shape, dst.Shape), BroadcastStrides(b.Shape, dst.Shape)},
		func(d int, offs []int, n int, inner []int) {
			ia, ib := offs[0], offs[1]
			sa, sb := inner[0], inner[1]
			binaryRow(op, ds[d:d+n], as[ia:ia+(n-1)*sa+1], bs[ib:ib+(n-1)*sb+1], sa, sb)
		})
	store(dst, ds)
}

// isRowVector reports whether shape broadcasts to dst as one row repeated: all its dims
// but a last one equal to dst's are 1.
func isRowVector(shape, dst Shape) bool {
	if len(shape) == 0 || len(dst) == 0 || shape[len(shape)-1] != dst[len(dst)-1] {
		return false
	}
	return shape.Numel() == dst[len(dst)-1]
}

// binaryRow sets d[j] = op(a[j·sa], b[j·sb]).
func binaryRow[T float](op BinaryOp, d, a, b []T, sa, sb int) {
	if d32, ok := any(d).([]float32); ok && hasVMathAVX512 && sa == 1 && (sb == 0 || sb == 1) && len(d) >= 16 {
		// Whole vectors in assembly (float32 arithmetic is exactly rounded either way).
		n := len(d) &^ 15
		a32, b32 := any(a).([]float32), any(b).([]float32)
		binaryF32AVX512(int(op), d32[:n], a32[:n], b32[:max(1, n*sb)], sb)
		d, a, b = d[n:], a[n:], b[n*sb:]
	}
	switch {
	case sa == 1 && sb == 1:
		a, b = a[:len(d)], b[:len(d)]
		switch op {
		case OpAdd:
			for j := range d {
				d[j] = a[j] + b[j]
			}
		case OpSub:
			for j := range d {
				d[j] = a[j] - b[j]
			}
		case OpMul:
			for j := range d {
				d[j] = a[j] * b[j]
			}
		case OpDiv:
			for j := range d {
				d[j] = a[j] / b[j]
			}
		}
	default:
		for j := range d {
			x, y := a[j*sa], b[j*sb]
			switch op {
			case OpAdd:
				d[j] = x + y
			case OpSub:
				d[j] = x - y
			case OpMul:
				d[j] = x * y
			case OpDiv:
				d[j] = x / y
			}
		}
	}
}

// forEachRow walks a contiguous tensor of shape row by row (a row is the last dim) and
// calls fn with the row's first element, each operand's offset for that row (from
// strides, one slice per operand), the row length and each operand's stride along the row.
func forEachRow(shape Shape, strides [][]int, fn func(d int, offs []int, n int, inner []int)) {
	if shape.Numel() == 0 {
		return
	}
	if len(shape) == 0 {
		offs := make([]int, len(strides))
		fn(0, offs, 1, offs)
		return
	}
	last := len(shape) - 1
	n := shape[last]
	inner := make([]int, len(strides))
	for k, st := range strides {
		inner[k] = st[last]
	}
	offs := make([]int, len(strides))
	idx := make([]int, last)
	rows := shape.Numel() / n
	for r := 0; r < rows; r++ {
		fn(r*n, offs, n, inner)
		for d := last - 1; d >= 0; d-- {
			idx[d]++
			for k, st := range strides {
				offs[k] += st[d]
			}
			if idx[d] < shape[d] {
				break
			}
			for k, st := range strides {
				offs[k] -= st[d] * idx[d]
			}
			idx[d] = 0
		}
	}
}

func (cpuBackend) Where(dst, cond, a, b Span) {
	if computeIs64(dst.DType) {
		whereKernel[float64](dst, cond, a, b)
	} else {
		whereKernel[float32](dst, cond, a, b)
	}
}

func whereKernel[T float](dst, cond, a, b Span) {
	cs, as, bs := load[float64](cond), load[T](a), load[T](b)
	ds := output[T](dst)
	strides := [][]int{
		BroadcastStrides(cond.Shape, dst.Shape),
		BroadcastStrides(a.Shape, dst.Shape),
		BroadcastStrides(b.Shape, dst.Shape),
	}
	forEachRow(dst.Shape, strides, func(d int, offs []int, n int, inner []int) {
		for j := 0; j < n; j++ {
			if cs[offs[0]+j*inner[0]] != 0 {
				ds[d+j] = as[offs[1]+j*inner[1]]
			} else {
				ds[d+j] = bs[offs[2]+j*inner[2]]
			}
		}
	})
	store(dst, ds)
}
