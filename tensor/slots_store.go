package tensor

import (
	"fmt"
	"unsafe"
)

// StoreSlots writes the keys (or values) of a step of several sequences into their
// head-major KV-cache slots: for each i, the n[i] positions of sequence i in src
// [1, N, G, HS] (position major, sequences in order: sequence i's are [o, o+n[i]) for
// o = n[0]+…+n[i−1]) go to positions [at[i], at[i]+n[i]) of slots[i] [1, G, L, HS]:
//
//	slots[i][0, g, at[i]+j, :] = src[0, o+j, g, :]
//
// It is slots[i].CopyNarrowFrom(2, at[i], src.Narrow(1, o, n[i]).Permute(0, 2, 1, 3)) for
// every i, without the views and the permuted copies: one strided copy per sequence of
// one position (per key/value head of a longer one). It records nothing in the graph.
//
// It panics if the lengths of slots, at and n differ, if Σ n ≠ N, if a slot is not
// [1, G, L, HS] with src's G, HS, dtype and device, or if a range of positions does not
// fit its slot.
func StoreSlots(slots []*Tensor, at, n []int, src *Tensor) {
	if len(at) != len(slots) || len(n) != len(slots) || src.Rank() != 4 || src.shape[0] != 1 {
		panic(fmt.Sprintf("tensor: StoreSlots: %d slots, %d starts, %d counts, src %v", len(slots), len(at), len(n), src.shape))
	}
	g, hs := src.shape[2], src.shape[3]
	total := 0
	for i, t := range slots {
		if t.Rank() != 4 || t.shape[0] != 1 || t.shape[1] != g || t.shape[3] != hs || t.dtype != src.dtype || t.Device() != src.Device() ||
			n[i] < 0 || at[i] < 0 || at[i]+n[i] > t.shape[2] {
			panic(fmt.Sprintf("tensor: StoreSlots: sequence %d: %d positions at %d of slot %v %v from %v %v",
				i, n[i], at[i], t.dtype, t.shape, src.dtype, src.shape))
		}
		total += n[i]
	}
	if total != src.shape[1] {
		panic(fmt.Sprintf("tensor: StoreSlots: %d positions for src %v", total, src.shape))
	}
	b, s := src.Device().backend, src.Span()
	first := make([]int, len(slots)) // sequence i's first position in src
	for i := 1; i < len(slots); i++ {
		first[i] = first[i-1] + n[i-1]
	}
	_, cpu := b.(cpuBackend)
	copy2D := b.Copy2D
	if cpu {
		copy2D = copyRows // no closure per copy: Copy2D's would be a fresh heap object each
	}
	store := func(lo, hi int) {
		for i := lo; i < hi; i++ {
			l, d, off := slots[i].shape[2], slots[i].Span(), first[i]
			switch {
			case n[i] == 1: // a row per head, L·HS apart in the slot
				copy2D(d.at(at[i]*hs), l*hs, s.at(off*g*hs), hs, g, hs)
			case n[i] > 1: // per head, n[i] contiguous rows in the slot
				for h := range g {
					copy2D(d.at((h*l+at[i])*hs), hs, s.at((off*g+h)*hs), g*hs, n[i], hs)
				}
			}
		}
	}
	if cpu {
		// A head's row lands on a page of its own, out of the TLB and the caches since
		// the previous step: the copies wait on memory, better on every CPU at once (a
		// decode step's 2·12·32 copies, serial 1.2 ms, in parallel 0.95 on 2 CPUs).
		parallelFor(len(slots), storeSlotsGrain, store)
		return
	}
	store(0, len(slots))
}

// copyRows is the CPU backend's Copy2D on the calling goroutine (Copy2D runs it on a
// band of rows per goroutine): row r of src, from src.Off+r·srcStride, goes to dst.Off+r·dstStride.
func copyRows(dst Span, dstStride int, src Span, srcStride int, rows, cols int) {
	if rows == 0 || cols == 0 {
		return
	}
	sz := dst.DType.Size()
	db, sb := dst.Buf.(*cpuBuf), src.Buf.(*cpuBuf)
	dAll := unsafe.Slice((*byte)(unsafe.Pointer(&db.words[0])), db.n*sz)
	sAll := unsafe.Slice((*byte)(unsafe.Pointer(&sb.words[0])), sb.n*sz)
	for r := range rows {
		d, s := (dst.Off+r*dstStride)*sz, (src.Off+r*srcStride)*sz
		copy(dAll[d:d+cols*sz], sAll[s:s+cols*sz])
	}
}

// storeSlotsGrain is the fewest sequences a goroutine of StoreSlots takes on the CPU.
const storeSlotsGrain = 4
