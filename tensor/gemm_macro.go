package tensor

// The macro-kernel level of the GEMM (gemm.go): a packed block of A against a packed
// block of B, tile by tile (macro), the few-row-panel order of a decode step, and the
// row panels and tiles the micro-kernels are called on.

// macro multiplies the packed blocks apack (mb rows) and bpack (nb columns) into the
// mb×nb block of C at c (row stride ldc). When ad is not nil, the full mr-row panels of A
// are read in place from ad (A's element (ic, pc) onwards; lda and transA as in A's
// storage) instead of from apack. When ldbd > 0, bpack is B in place (row stride ldbd),
// which needs every panel of A in place and not transposed (gemmDirectB). next, when not
// nil, is the shared B panel read after the block's last one (gemmPlan.nextB).
//
// It sweeps the B panels once per A panel (A's panel stays in L1, B's block streams from
// L2), or, when A has at most gemmFewPanels panels, the A panels once per B panel (see
// gemmFewPanels). The order changes no tile's value.
func (w *gemmWorker) macro(kern *gemmKernel, c []float32, ldc int, apack, bpack, ad []float32, lda, ldbd int, transA bool, mb, nb, kb, acc int, next *float32) {
	mr, nr := kern.mr, kern.nr
	var rps [gemmFewPanels]gemmRowPanel
	if mb <= gemmFewPanels*mr {
		for ir := 0; ir < mb; ir += mr {
			rps[ir/mr] = w.rowPanel(kern, apack, ad, lda, transA, ir, mb, kb)
			rps[ir/mr].ldb = ldbd
		}
		if n := (mb + mr - 1) / mr; next != nil && canParts(rps[:n], nr) {
			w.macroParts(rps[:n], c, ldc, bpack, nb, kb, acc, next)
			return
		}
		for jr := 0; jr < nb; jr += nr {
			for ir := 0; ir < mb; ir += mr {
				w.tile(&rps[ir/mr], c, ldc, bpack, ir, jr, nb, kb, acc)
			}
		}
		return
	}
	for ir := 0; ir < mb; ir += mr {
		rp := w.rowPanel(kern, apack, ad, lda, transA, ir, mb, kb)
		rp.ldb = ldbd
		for jr := 0; jr < nb; jr += nr {
			w.tile(&rp, c, ldc, bpack, ir, jr, nb, kb, acc)
		}
	}
}

// gemmFewPanels is the most mr-row panels of A for which macro sweeps the A panels once
// per B panel rather than the B panels once per A panel. With so few rows (a decode
// step's 32: 12+12+8), B is read from memory, once: swept once per A panel, a block of B
// came from memory in the first sweep and from L2 in the others, its memory traffic
// bunched into a third of the time; swept once, each B panel is used by all the A
// panels (a few KiB, in cache) in a row while the kernels prefetch the next (gemmgen's
// pfNextB), so it loads during three tiles. A decode step (BenchmarkSgemmPacked/step_32)
// ran 250 GFLOP/s against 234 with this order alone, 290 with the prefetch too.
const gemmFewPanels = 3

// gemmRowPanel is one mr-row panel of A as macro's tiles read it.
type gemmRowPanel struct {
	tk      *gemmKernel // the tile's kernel, computing tk.mr ≥ rows rows
	rows    int         // the panel's rows
	ap      *float32    // the packed panel
	a0      *float32    // the panel's first element in place, or nil
	transA  bool        // A in place is stored transposed (k steps lda apart)
	lda, kb int         // A's row stride in place, and the kc block's depth
	ldb     int         // B's row stride when its tiles read B in place, else 0 (packed)
}

// rowPanel returns the panel of rows [ir, ir+mr) of the block (see macro).
func (w *gemmWorker) rowPanel(kern *gemmKernel, apack, ad []float32, lda int, transA bool, ir, mb, kb int) gemmRowPanel {
	rows := min(kern.mr, mb-ir)
	tk := kern.edge(rows)
	tr := tk.mr
	rp := gemmRowPanel{tk: tk, rows: rows, ap: &apack[ir*kb], transA: transA, lda: lda, kb: kb}
	inPlace := ad != nil && rows == tr
	switch {
	case inPlace && transA:
		_ = ad[(kb-1)*lda+ir+tr-1] // bounds the kernel's reads
		rp.a0 = &ad[ir]
	case inPlace:
		_ = ad[(ir+tr-1)*lda+kb-1]
		rp.a0 = &ad[ir*lda]
	}
	return rp
}

// tile computes the tile of rows [ir, ir+mr) and columns [jr, jr+nr) of macro's block,
// through w.tmp when it is partial.
func (w *gemmWorker) tile(rp *gemmRowPanel, c []float32, ldc int, bpack []float32, ir, jr, nb, kb, acc int) {
	tk, nr := rp.tk, rp.tk.nr
	run := func(bp, cp *float32, ldc, acc int) {
		switch {
		case rp.ldb > 0 && (rp.a0 == nil || rp.transA):
			panic("tensor: gemm: B in place needs A in place by rows") // gemmDirectB
		case rp.ldb > 0:
			tk.tileRowAB(kb, rp.a0, rp.lda, bp, rp.ldb, cp, ldc, acc)
		case rp.a0 != nil && rp.transA:
			tk.tileColA(kb, rp.a0, rp.lda, bp, cp, ldc, acc)
		case rp.a0 != nil:
			tk.tileRowA(kb, rp.a0, rp.lda, bp, cp, ldc, acc)
		default:
			tk.tile(kb, rp.ap, bp, cp, ldc, acc)
		}
	}
	var bp *float32
	if rp.ldb > 0 {
		_ = bpack[(kb-1)*rp.ldb+jr+nr-1] // bounds the kernel's reads
		bp = &bpack[jr]
	} else {
		bp = &bpack[jr*kb]
	}
	cols := min(nr, nb-jr)
	if rp.rows == tk.mr && cols == nr {
		cp := c[ir*ldc+jr : ir*ldc+jr+(tk.mr-1)*ldc+nr] // bounds the kernel's writes
		run(bp, &cp[0], ldc, acc)
		return
	}
	tmp := w.tmp
	run(bp, &tmp[0], nr, 0)
	for i := 0; i < rp.rows; i++ {
		row := c[(ir+i)*ldc+jr : (ir+i)*ldc+jr+cols]
		t := tmp[i*nr : i*nr+cols]
		if acc != 0 {
			for j := range row {
				row[j] += t[j]
			}
		} else {
			copy(row, t)
		}
	}
}
