package tensor

// The tile products of the fused attention (cpu_attention.go). On the SIMD path (float32,
// a head size within the kernel's kc) they call gemm.go's micro-kernels directly:
//
//   - each B operand is packed once into the kernel's nr-column panels (packB's layout)
//     and reused by the products that share it: in the forward a key tile's Kᵀ and V for
//     the query tiles a goroutine computes in a row (whole heads when there are enough),
//     in the backward a key tile's Kᵀ, Vᵀ and K for all query tiles of the key range and
//     a query tile's Q and dO for all key tiles of the range;
//   - A is read in place (or packed a panel at a time where no in-place kernel fits);
//   - under a causal mask each mr-row panel of C computes only what the mask leaves it
//     (attnSpan): the columns of scores its queries see, the keys (k) its queries see, or
//     the queries (k) that see its keys.
//
// Numerics: every element of C is one chain of fused multiply-adds over k in increasing
// order starting from zero, added to C when accumulating — what sgemm computes when K ≤ kc,
// which the SIMD path requires. The terms a span skips are exact zeros (probabilities and
// gradients of hidden keys), which leave such a chain unchanged, or scores nobody reads;
// so for finite operands spans change no bit (an infinite key or value times a hidden
// zero, NaN in the whole product, is skipped). Other compute types, or head sizes past kc, multiply the whole
// tile with matmulRef's loops or sgemm.

// attnB is the B operand op(B) [k, n] of tile products: in place (raw: [n, k] when trans,
// else [k, n]) and, on the SIMD path, packed into nr-column panels kb deep (packB's
// layout), of which a product uses the first n columns and any range of k ≤ kb.
type attnB[T float] struct {
	raw    []T
	trans  bool
	packed []float32
	kb     int
}

// Modes of attnSpan.
const (
	attnAll     = iota // the whole product
	attnCols           // row r of C needs its first r+d columns
	attnKPrefix        // row r of C needs k < r+d
	attnKSuffix        // row r of C needs k ≥ r+d
)

// attnSpan is the part of a tile product that a causal mask leaves, as a function of the
// row r of C (see the modes). For queries i0+r and keys j0+j, query i seeing keys j < i+off+1
// (off = Tk−Tq): scores and products over keys use d = i0+off+1−j0; for keys j0+r and
// queries i0+kk, products over queries use d = j0−off−i0.
type attnSpan struct{ mode, d int }

// limits returns what rows [ir, ir+rows) of an m×n product k deep need: their first cols
// columns (whole nr-wide panels where n allows) and k in [k0, k1).
func (s attnSpan) limits(ir, rows, n, k, nr int) (cols, k0, k1 int) {
	cols, k1 = n, k
	switch s.mode {
	case attnCols:
		cols = min(n, roundUp(max(0, ir+rows-1+s.d), nr))
	case attnKPrefix:
		k1 = min(k, max(0, ir+rows-1+s.d))
	case attnKSuffix:
		k0 = min(k, max(0, ir+s.d))
	}
	return cols, k0, k1
}

// span returns the span of mode with offset d under a causal mask, else the whole product.
func (g *attnGeom) span(mode, d int) attnSpan {
	if !g.causal {
		return attnSpan{mode: attnAll}
	}
	return attnSpan{mode: mode, d: d}
}

// operand returns src as the B operand op(B) [k, n] (src [n, k] when trans, else
// [k, n]), packed into dst on the SIMD path.
func (c *attnCall[T]) operand(dst []float32, src []T, trans bool, k, n int) attnB[T] {
	if !c.fast {
		return attnB[T]{raw: src, trans: trans, kb: k}
	}
	ld := n
	if trans {
		ld = k
	}
	return c.operandLD(dst, src, trans, k, n, ld)
}

// operandLD is operand on the SIMD path for src whose rows are ld apart.
func (c *attnCall[T]) operandLD(dst []float32, src []T, trans bool, k, n, ld int) attnB[T] {
	b := c.packed(dst, k, n)
	packB(c.kern, b.packed, any(src).([]float32), trans, ld, 0, k, 0, n)
	return b
}

// packed returns the B operand op(B) [k, n] that operand packed into dst.
func (c *attnCall[T]) packed(dst []float32, k, n int) attnB[T] {
	return attnB[T]{packed: dst[:roundUp(n, c.kern.nr)*k], kb: k}
}

// product computes dst (m×n, row stride n) = op(a)·op(b), k deep, or adds it when acc: a
// is [m, k] or, when transA, [k, m]. On the SIMD path only the part sp leaves is computed.
func (c *attnCall[T]) product(t *attnTiles[T], dst, a []T, transA bool, b attnB[T], m, n, k int, acc bool, sp attnSpan) {
	c.productLD(t, dst, a, 0, transA, b, m, n, k, acc, sp)
}

// productLD is product for a whose rows (or, transA, k steps) are lda apart, 0 meaning
// packed tight (k apart, or m when transA), as a must be off the SIMD path.
func (c *attnCall[T]) productLD(t *attnTiles[T], dst, a []T, lda int, transA bool, b attnB[T], m, n, k int, acc bool, sp attnSpan) {
	p := MatMulParams{M: m, N: n, K: k, TransA: transA, TransB: b.trans, Accumulate: acc, Batch: 1}
	switch {
	case c.fast:
		if lda == 0 {
			lda = k
			if transA {
				lda = m
			}
		}
		t.g.product(any(dst).([]float32), n, any(a).([]float32), transA, lda, b.packed, b.kb, p, sp)
	case c.kern != nil:
		sgemm(c.kern, any(dst).([]float32), any(a).([]float32), any(b.raw).([]float32), p, 1)
	default:
		for i := 0; i < m; i++ {
			matmulRefRow(dst[i*n:], a, b.raw, t.arow[:k], i, &p)
		}
	}
}

// attnGemm is one goroutine's state for the SIMD path's products.
type attnGemm struct {
	kern  *gemmKernel
	apack []float32 // one A panel, mr rows
	tmp   []float32 // one mr×nr tile of C
}

// product is attnCall.product on the SIMD path: c has row stride ldc, a row stride (or,
// transA, k stride) lda, b is B's packed panels, kb deep.
func (g *attnGemm) product(c []float32, ldc int, a []float32, transA bool, lda int, b []float32, kb int, p MatMulParams, sp attnSpan) {
	kern := g.kern
	mr, nr := kern.mr, kern.nr
	acc := 0
	if p.Accumulate {
		acc = 1
	}
	g.tmp = grow(g.tmp, mr*nr)
	for ir := 0; ir < p.M; ir += mr {
		rows := min(mr, p.M-ir)
		cols, k0, k1 := sp.limits(ir, rows, p.N, p.K, nr)
		if k0 >= k1 {
			if acc == 0 {
				for i := ir; i < ir+rows; i++ {
					clear(c[i*ldc : i*ldc+cols])
				}
			}
			continue
		}
		tk := kern.edge(rows) // computes tk.mr ≥ rows rows
		a0, inPlace := g.panelA(tk, a, transA, lda, ir, rows, k0, k1)
		for jr := 0; jr < cols; jr += nr {
			_ = b[jr*kb+k1*nr-1] // bounds the kernel's reads
			bp := &b[jr*kb+k0*nr]
			w := min(nr, cols-jr)
			if rows == tk.mr && w == nr {
				cp := c[ir*ldc+jr : ir*ldc+jr+(rows-1)*ldc+nr] // bounds the kernel's writes
				attnTile(tk, inPlace, transA, k1-k0, a0, lda, bp, &cp[0], ldc, acc)
				continue
			}
			attnTile(tk, inPlace, transA, k1-k0, a0, lda, bp, &g.tmp[0], nr, 0)
			for i := 0; i < rows; i++ {
				row, t := c[(ir+i)*ldc+jr:(ir+i)*ldc+jr+w], g.tmp[i*nr:i*nr+w]
				if acc == 0 {
					copy(row, t)
					continue
				}
				for j := range row {
					row[j] += t[j]
				}
			}
		}
	}
}

// panelA returns where kernel tk reads rows [ir, ir+rows) and k in [k0, k1) of op(A):
// in place when rows fill tk and it has an in-place variant for A's layout, else packed
// into apack (mr-row panel, the layout tk.tile reads).
func (g *attnGemm) panelA(tk *gemmKernel, a []float32, transA bool, lda, ir, rows, k0, k1 int) (a0 *float32, inPlace bool) {
	switch {
	case rows == tk.mr && transA && tk.tileColA != nil:
		_ = a[(k1-1)*lda+ir+rows-1] // bounds the kernel's reads
		return &a[k0*lda+ir], true
	case rows == tk.mr && !transA && tk.tileRowA != nil:
		_ = a[(ir+rows-1)*lda+k1-1]
		return &a[ir*lda+k0], true
	}
	g.apack = grow(g.apack, g.kern.mr*(k1-k0))
	packA(g.kern, g.apack, a, transA, lda, ir, rows, k0, k1-k0)
	return &g.apack[0], false
}

// attnTile runs kernel tk on a tile: A in place (transposed or not) or packed.
func attnTile(tk *gemmKernel, inPlace, transA bool, k int, a *float32, lda int, b, c *float32, ldc, acc int) {
	switch {
	case !inPlace:
		tk.tile(k, a, b, c, ldc, acc)
	case transA:
		tk.tileColA(k, a, lda, b, c, ldc, acc)
	default:
		tk.tileRowA(k, a, lda, b, c, ldc, acc)
	}
}
