package tensor

import "fmt"

// The grouped matrix product of a mixture of experts (GroupedMatMul) and the optional
// kernel a backend implements for it (GroupedMatMulKernels).

// GroupedMatMulParams describes a grouped product dst = x·op(w[e]) over groups of rows:
// x is T×K with its rows grouped by expert in order, Counts[e] rows for expert e (summing
// to T); w is E matrices, K×N each, or N×K when TransB; dst is T×N, group e's rows the
// product of x's rows of group e with op(w[e]).
type GroupedMatMulParams struct {
	Counts []int
	K, N   int
	TransB bool
}

// GroupedMatMulKernels is implemented by a backend that computes GroupedMatMul in one
// call over all experts (the CPU backend does). Others get one MatMul per expert with
// rows (groupedMatMulEach). Each row of dst must equal, bit for bit, the backend's MatMul
// of that row alone with its expert's matrix.
type GroupedMatMulKernels interface {
	GroupedMatMul(dst, x, w Span, p GroupedMatMulParams)
}

// GroupedMatMul returns y [T, N], the rows of x [T, K] grouped by expert in order (counts[e]
// rows for expert e) each multiplied by its expert's matrix of w: [E, K, N], or [E, N, K]
// when transB (a weight stored output-major). A group of 0 rows is skipped (its expert's
// weight gradient is zero). Each row of y equals MatMul of that row with its expert's
// matrix, bit for bit. It is differentiable in x and w, with counts fixed; the weight
// gradient is computed per expert and not itself recorded for a second derivative.
//
// It panics if x and w are not of one float dtype on one device, if x is not a matrix or w
// not [E, K, N] ([E, N, K] when transB), or if counts does not have E non-negative entries
// summing to T.
func GroupedMatMul(x, w *Tensor, counts []int, transB bool) *Tensor {
	checkSame("GroupedMatMul", x, w)
	p := groupedParams(x.shape, w.shape, counts, transB)
	T := x.shape[0]
	out := empty(x.Device(), x.dtype, Shape{T, p.N})
	groupedMatMul(x.Device().backend, out.Span(), x.Span(), w.Span(), p)
	return record1("GroupedMatMul", out, []*Tensor{x, w}, func(gy *Tensor) []*Tensor {
		var gx, gw *Tensor
		if needsGrad(x) {
			// gx_e = gy_e·op(w_e)ᵀ: w read with the other transposition.
			gx = GroupedMatMul(gy, w, counts, !transB)
		}
		if needsGrad(w) {
			gw = groupedWeightGrad(x, gy, w.shape, p)
		}
		return []*Tensor{gx, gw}
	})
}

// groupedParams checks GroupedMatMul's operands and returns its parameters.
func groupedParams(xs, ws Shape, counts []int, transB bool) GroupedMatMulParams {
	if len(xs) != 2 || len(ws) != 3 {
		panic(fmt.Sprintf("tensor: GroupedMatMul: x %v, w %v: want x [T, K], w [E, K, N]", xs, ws))
	}
	k, n := ws[1], ws[2]
	if transB {
		k, n = n, k
	}
	if xs[1] != k {
		panic(fmt.Sprintf("tensor: GroupedMatMul: x %v, w %v (transB=%v): inner dims differ (%d vs %d)", xs, ws, transB, xs[1], k))
	}
	if len(counts) != ws[0] {
		panic(fmt.Sprintf("tensor: GroupedMatMul: %d counts for %d experts", len(counts), ws[0]))
	}
	sum := 0
	for e, c := range counts {
		if c < 0 {
			panic(fmt.Sprintf("tensor: GroupedMatMul: counts[%d] = %d", e, c))
		}
		sum += c
	}
	if sum != xs[0] {
		panic(fmt.Sprintf("tensor: GroupedMatMul: counts sum to %d, x has %d rows", sum, xs[0]))
	}
	return GroupedMatMulParams{Counts: counts, K: k, N: n, TransB: transB}
}

// groupedMatMul computes the grouped product on backend be: in one call when it
// implements GroupedMatMulKernels, else per expert.
func groupedMatMul(be Backend, dst, x, w Span, p GroupedMatMulParams) {
	if g, ok := be.(GroupedMatMulKernels); ok {
		g.GroupedMatMul(dst, x, w, p)
		return
	}
	groupedMatMulEach(be, dst, x, w, p)
}

// groupedMatMulEach computes the grouped product with one MatMul per expert with rows.
func groupedMatMulEach(be Backend, dst, x, w Span, p GroupedMatMulParams) {
	K, N := p.K, p.N
	row := 0
	for e, c := range p.Counts {
		if c == 0 {
			continue
		}
		mp := MatMulParams{Batch: 1, M: c, N: N, K: K, TransB: p.TransB}
		be.MatMul(sub(dst, row*N, c, N), sub(x, row*K, c, K), sub(w, e*K*N, K, N), mp)
		row += c
	}
}

// groupedWeightGrad returns GroupedMatMul's gradient for w (shape ws): for each expert e,
// x_eᵀ·gy_e [K, N] (gy_eᵀ·x_e [N, K] when transB), zero for an expert without rows.
func groupedWeightGrad(x, gy *Tensor, ws Shape, p GroupedMatMulParams) *Tensor {
	K, N := p.K, p.N
	gw := Zeros(x.Device(), x.dtype, ws...)
	be := x.Device().backend
	xs, gs, ds := x.Span(), gy.Span(), gw.Span()
	row := 0
	for e, c := range p.Counts {
		if c == 0 {
			continue
		}
		xe, ge := sub(xs, row*K, c, K), sub(gs, row*N, c, N)
		if p.TransB { // [N, K] = gy_eᵀ·x_e
			be.MatMul(sub(ds, e*K*N, N, K), ge, xe, MatMulParams{Batch: 1, M: N, N: K, K: c, TransA: true})
		} else { // [K, N] = x_eᵀ·gy_e
			be.MatMul(sub(ds, e*K*N, K, N), xe, ge, MatMulParams{Batch: 1, M: K, N: N, K: c, TransA: true})
		}
		row += c
	}
	return gw
}

// sub returns the rows×cols matrix that starts off elements into s.
func sub(s Span, off, rows, cols int) Span {
	s = s.at(off)
	s.Shape = Shape{rows, cols}
	return s
}
