package tensor

import "unsafe"

// A decode step multiplies a few rows (one per sequence: 32 = 12+12+8, three mr-row
// panels) by weights streamed from memory, packed once (PackedWeights). macro computes
// such a block B panel by B panel, all row panels per B panel (gemmFewPanels); a B panel
// is kc×nr floats (48 KiB), as much as the L1, so each of its tiles read it from L2 again,
// with the A rows, while the next panel streams in. macroParts computes each B panel
// gemmPartK k steps at a time for all its row panels, carrying each tile's accumulators
// through memory (tilePart) between parts: the part of B and of the A rows the tiles
// share stays in L1. A float32 stored and loaded back is unchanged, so every element of
// C is the same chain of fused multiply-adds, bitwise.

// gemmPartK is how many k steps of a B panel macroParts computes for every row panel
// before the next k steps: 16 KiB of A and 8 KiB of B for 32 rows. A decode step
// (BenchmarkSgemmPacked/step_32; Zen 5 VM, 2 threads, alternated in one process) ran
// about 10% faster with parts of 64 than with whole panels; 32, 96 and 128 ran between.
const gemmPartK = 64

// canParts reports whether macroParts can compute a block with the row panels rps: two
// or more, each full, read in place by rows with tilePart, B packed nr floats (two
// cache lines, which two tiles prefetch) per k step.
func canParts(rps []gemmRowPanel, nr int) bool {
	if len(rps) < 2 || nr*4 != 128 {
		return false
	}
	for i := range rps {
		rp := &rps[i]
		if rp.a0 == nil || rp.transA || rp.ldb != 0 || rp.tk.tilePart == nil || rp.rows != rp.tk.mr {
			return false
		}
	}
	return true
}

// macroParts is macro for a block whose row panels rps pass canParts: B packed in bpack
// (nb columns, kb deep), followed by the panel next (gemmPlan.nextB). The first two
// tiles of each part prefetch the same part of the next B panel, a line per k step each.
// A last, partial panel of columns goes through tile.
func (w *gemmWorker) macroParts(rps []gemmRowPanel, c []float32, ldc int, bpack []float32, nb, kb, acc int, next *float32) {
	mr, nr := rps[0].tk.mr, rps[0].tk.nr
	w.spill = grow(w.spill, gemmFewPanels*mr*nr)
	for jr := 0; jr < nb; jr += nr {
		if nb-jr < nr {
			for i := range rps {
				w.tile(&rps[i], c, ldc, bpack, i*mr, jr, nb, kb, acc)
			}
			return
		}
		bp := bpack[jr*kb : (jr+nr)*kb] // bounds the kernels' reads
		nx := unsafe.Pointer(next)
		if jr+nr < nb {
			nx = unsafe.Pointer(&bpack[(jr+nr)*kb])
		}
		for kk := 0; kk < kb; kk += gemmPartK {
			k1 := min(gemmPartK, kb-kk)
			part := 0
			if kk > 0 {
				part |= 1 // continue from the spilled accumulators
			}
			if kk+k1 < kb {
				part |= 2 // spill them for the next part
			}
			for i := range rps {
				rp := &rps[i]
				cp := c[i*mr*ldc+jr : i*mr*ldc+jr+(rp.tk.mr-1)*ldc+nr] // bounds the kernel's writes
				pf := unsafe.Pointer(&bp[kk*nr])                       // in cache: no prefetch needed
				if i < 2 {
					pf = unsafe.Add(nx, kk*nr*4+i*k1*64)
				}
				a := (*float32)(unsafe.Add(unsafe.Pointer(rp.a0), kk*4))
				rp.tk.tilePart(k1, a, rp.lda, &bp[kk*nr], &cp[0], ldc, acc, (*float32)(pf), &w.spill[i*mr*nr], part)
			}
		}
	}
}
