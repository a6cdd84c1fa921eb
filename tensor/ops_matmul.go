package tensor

import "fmt"

// MatMul returns the matrix product a·b of a [..., M, K] and b [..., K, N]. Batch dims
// (all but the last two) must be equal, or one operand must be a plain matrix, which is
// then used for every batch (a weight shared across [B, T]). It panics if the inner dims
// or the batch dims differ, naming both shapes.
func MatMul(a, b *Tensor) *Tensor { return MatMulT(a, b, false, false) }

// MatMulT returns op(a)·op(b), where op transposes the last two dims when transA or transB
// is set, without materializing the transpose.
func MatMulT(a, b *Tensor, transA, transB bool) *Tensor {
	checkSame("MatMul", a, b)
	if len(a.shape) < 2 || len(b.shape) < 2 {
		panic(fmt.Sprintf("tensor: MatMul: %v x %v: operands need at least 2 dims", a.shape, b.shape))
	}
	ra, rb := len(a.shape), len(b.shape)
	m, k := a.shape[ra-2], a.shape[ra-1]
	if transA {
		m, k = k, m
	}
	kb, n := b.shape[rb-2], b.shape[rb-1]
	if transB {
		kb, n = n, kb
	}
	if k != kb {
		panic(fmt.Sprintf("tensor: MatMul: %v x %v (transA=%v, transB=%v): inner dims differ (%d vs %d)", a.shape, b.shape, transA, transB, k, kb))
	}
	batchA, batchB := a.shape[:ra-2], b.shape[:rb-2]
	p := MatMulParams{M: m, N: n, K: k, TransA: transA, TransB: transB, Batch: 1}
	var batch Shape
	switch {
	case len(batchB) == 0 && !transA: // fold a's batch into its rows
		p.M = batchA.Numel() * m
		batch = batchA
	case len(batchB) == 0:
		p.Batch, p.StrideA = batchA.Numel(), m*k
		batch = batchA
	case len(batchA) == 0:
		p.Batch, p.StrideB = batchB.Numel(), k*n
		batch = batchB
	case batchA.Equal(batchB):
		p.Batch, p.StrideA, p.StrideB = batchA.Numel(), m*k, k*n
		batch = batchA
	default:
		panic(fmt.Sprintf("tensor: MatMul: %v x %v: batch dims differ", a.shape, b.shape))
	}
	shape := append(batch.Clone(), m, n)
	out := empty(a.Device(), a.dtype, shape)
	a.Device().backend.MatMul(out.Span(), a.Span(), b.Span(), p)
	return record1("MatMul", out, []*Tensor{a, b}, func(gy *Tensor) []*Tensor {
		var ga, gb *Tensor
		if needsGrad(a) {
			if transA {
				ga = MatMulT(b, gy, transB, true)
			} else {
				ga = MatMulT(gy, b, false, !transB)
			}
			ga = sumTo(ga, a.shape)
		}
		if needsGrad(b) {
			switch {
			case len(batchB) == 0 && len(batchA) > 0 && !transA:
				// Shared weight: one GEMM over all rows instead of a batch to sum, written
				// straight into the weight's gradient when it is a leaf.
				a2, g2 := a.Reshape(-1, k), gy.Reshape(-1, n)
				x, y := a2, g2 // bᵀ·… : gb = a2ᵀ·g2 [k, n]
				if transB {
					x, y = g2, a2 // gb = g2ᵀ·a2 [n, k]
				}
				if directLeafGrad(b) {
					sink, overwrite := leafGradSink(b)
					matMulInto(sink, x, y, !overwrite)
					gb = gradAccumulated
					break
				}
				gb = MatMulT(x, y, true, false)
			case transB:
				gb = MatMulT(gy, a, true, transA)
			default:
				gb = MatMulT(a, gy, !transA, false)
			}
			if gb != gradAccumulated {
				gb = sumTo(gb, b.shape)
			}
		}
		return []*Tensor{ga, gb}
	})
}

// matMulInto sets dst, or adds to it when acc, the product xᵀ·y of the matrices x [r, m]
// and y [r, n]: dst is [m, n].
func matMulInto(dst, x, y *Tensor, acc bool) {
	r, m, n := x.shape[0], x.shape[1], y.shape[1]
	p := MatMulParams{Batch: 1, M: m, N: n, K: r, TransA: true, Accumulate: acc}
	dst.Device().backend.MatMul(dst.Span(), x.Span(), y.Span(), p)
}
