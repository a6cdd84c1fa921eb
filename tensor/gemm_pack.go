package tensor

import (
	"runtime"
	"sync/atomic"
)

// Packing for the SGEMM of gemm.go: op(A) into mr-row panels and op(B) into nr-column
// panels, k-major, zero-padded; the assembly fast paths are gemmKernel's panelA, panelB,
// copyA and copyB.

// packA packs op(A)[i0:i0+m, k0:k0+k] into mr-row panels: element (i, kk) goes to
// dst[(i/mr)·mr·k + kk·mr + i%mr]; rows past m in the last panel are zero. A is stored
// M×K (row stride lda) or, when trans, K×M.
func packA(kern *gemmKernel, dst, a []float32, trans bool, lda, i0, m, k0, k int) {
	if trans {
		packRows(dst, a, lda, k0, k, i0, m, kern.mr, kern.copyA)
	} else {
		packCols(dst, a, lda, k0, k, i0, m, kern.mr, kern.panelA)
	}
}

// packB packs op(B)[k0:k0+k, j0:j0+n] into nr-column panels: element (kk, j) goes to
// dst[(j/nr)·nr·k + kk·nr + j%nr]; columns past n in the last panel are zero. B is stored
// K×N (row stride ldb) or, when trans, N×K.
func packB(kern *gemmKernel, dst, b []float32, trans bool, ldb, k0, k, j0, n int) {
	if trans {
		packCols(dst, b, ldb, k0, k, j0, n, kern.nr, kern.panelB)
	} else {
		packRows(dst, b, ldb, k0, k, j0, n, kern.nr, kern.copyB)
	}
}

// packRows packs a matrix stored k-major (src[kk·ld + j]), rows k0…k0+k-1 and columns
// j0…j0+n-1, into w-wide panels: dst[(j/w)·w·k + kk·w + j%w]. fast, when set, packs the
// full panels (see gemmKernel.copyA).
func packRows(dst, src []float32, ld, k0, k, j0, n, w int, fast func(dst, src *float32, ld, k, panels int)) {
	full := n / w
	if fast != nil && full > 0 {
		_ = src[(k0+k-1)*ld+j0+full*w-1] // the panels lie inside src
		fast(&dst[0], &src[k0*ld+j0], ld, k, full)
	} else {
		for kk := 0; kk < k; kk++ { // row by row of src, which is read in order
			row := src[(k0+kk)*ld+j0 : (k0+kk)*ld+j0+full*w]
			for p := 0; p < full; p++ {
				d, s := dst[p*w*k+kk*w:p*w*k+kk*w+w], row[p*w:p*w+w]
				for c := range d {
					d[c] = s[c]
				}
			}
		}
	}
	if jp := full * w; jp < n {
		cols := n - jp
		d := dst[jp*k : jp*k+w*k]
		for kk := 0; kk < k; kk++ {
			row := src[(k0+kk)*ld+j0+jp:]
			copy(d[kk*w:kk*w+cols], row[:cols])
			clear(d[kk*w+cols : kk*w+w])
		}
	}
}

// packCols packs a matrix stored with k contiguous (src[j·ld + kk]), columns k0…k0+k-1
// of rows j0…j0+n-1, into w-wide panels: dst[(j/w)·w·k + kk·w + j%w]. fast, when set,
// transposes a panel (see gemmKernel.panelA).
func packCols(dst, src []float32, ld, k0, k, j0, n, w int, fast func(dst, src *float32, ld, k, rows int)) {
	for jp := 0; jp < n; jp += w {
		cols := min(w, n-jp)
		d := dst[jp*k : jp*k+w*k]
		k0 := k0
		if fast != nil && k >= 16 {
			k16 := k &^ 15
			_ = src[(j0+jp+cols-1)*ld+k0+k16-1] // the panel lies inside src
			fast(&d[0], &src[(j0+jp)*ld+k0], ld, k16, cols)
			d, k0 = d[k16*w:], k0+k16
		}
		kr := len(d) / w // columns left
		for j := 0; j < cols; j++ {
			row := src[(j0+jp+j)*ld+k0 : (j0+jp+j)*ld+k0+kr]
			for kk, v := range row {
				d[kk*w+j] = v
			}
		}
		for j := cols; j < w; j++ {
			for kk := 0; kk < kr; kk++ {
				d[kk*w+j] = 0
			}
		}
	}
}

// sharedPack is an operand that several goroutines share, packed where they first need
// it: n rows (of A) or columns (of B) in w-wide panels, for every kc block. Block pc
// starts at pad·pc, pad being n rounded up to w. Each (block, panel) is packed once, by
// the first goroutine that asks for it (ensure), so it is still in cache when it is used
// and no goroutine waits for a packing phase to end. The zero value packs nothing.
type sharedPack struct {
	data        []float32
	state       []atomic.Int32 // per block and panel: 0 not packed, 1 being packed, 2 packed
	n, w, kc, k int
	pad, panels int
	packPanel   func(dst []float32, lo, hi, pc, kb int)
}

// sharedBuf is the storage of a sharedPack, recycled between calls.
type sharedBuf struct {
	data  []float32
	state []atomic.Int32
}

// init sizes buf for the operand and returns the packed data (each panel filled once
// ensure has returned for it) and pad. packPanel packs the panels [lo, hi) of block pc
// into dst.
func (s *sharedPack) init(buf *sharedBuf, n, w, kc, k int, packPanel func(dst []float32, lo, hi, pc, kb int)) ([]float32, int) {
	s.n, s.w, s.kc, s.k, s.packPanel = n, w, kc, k, packPanel
	s.pad = roundUp(n, w)
	s.panels = s.pad / w
	buf.data = grow(buf.data, s.pad*k)
	nstate := s.panels * ((k + kc - 1) / kc)
	if cap(buf.state) < nstate {
		buf.state = make([]atomic.Int32, nstate)
	}
	buf.state = buf.state[:nstate]
	for i := range buf.state {
		buf.state[i].Store(0)
	}
	s.data, s.state = buf.data, buf.state
	return s.data, s.pad
}

// ensure returns once the panels holding rows (or columns) [lo, hi) of block pc are
// packed: it packs those no goroutine has taken, starting at the fraction first of the
// range (so goroutines asking for the same range at once take different panels), then
// waits for those that others are packing.
func (s *sharedPack) ensure(pc, lo, hi int, first float64) {
	p0, p1 := lo/s.w, (hi+s.w-1)/s.w
	blk := pc / s.kc
	kb := min(s.kc, s.k-pc)
	st := s.state[blk*s.panels:]
	start := p0 + int(first*float64(p1-p0))
	for q := p0; q < p1; q++ {
		i := start + q - p0
		if i >= p1 {
			i -= p1 - p0
		}
		if st[i].Load() == 0 && st[i].CompareAndSwap(0, 1) {
			i0, i1 := i*s.w, min(s.n, (i+1)*s.w)
			s.packPanel(s.data[s.pad*pc+i0*kb:], i0, i1, pc, kb)
			st[i].Store(2)
		}
	}
	for i := p0; i < p1; i++ {
		waitPacked(&st[i])
	}
}

// packSpins is how many times waitPacked reads a panel's state before yielding. A panel
// takes a few microseconds to pack; runtime.Gosched goes through the global run queue and
// wakes an idle P, which on 2 busy CPUs took CPU time from the goroutine packing the panel
// (11% of a training step's samples were in the scheduler).
const packSpins = 4096

// waitPacked returns once *st is 2 (packed), reading it packSpins times between yields.
func waitPacked(st *atomic.Int32) {
	for st.Load() != 2 {
		for n := 0; n < packSpins && st.Load() != 2; n++ {
		}
		if st.Load() != 2 {
			runtime.Gosched()
		}
	}
}
