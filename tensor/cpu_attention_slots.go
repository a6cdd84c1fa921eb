package tensor

import "sync"

// AttentionSlots implements SlotAttentionKernels: the forward kernel of cpu_attention.go
// over the heads of all the calls in one pass (attnBatch), each call's keys and values
// read in place from their [B, G, L, HS] slots, of which the geometry sees the first Tk
// positions (kvRows, by the slot's strides).
func (cpuBackend) AttentionSlots(as []AttentionArgs, ps []AttentionParams, tk []int) {
	if computeIs64(as[0].Q.DType) {
		attnSlots[float64](as, ps, tk)
	} else {
		attnSlots[float32](as, ps, tk)
	}
}

func attnSlots[T float](as []AttentionArgs, ps []AttentionParams, tk []int) {
	buf, _ := slotCalls.Get().(*slotCallsBuf[T])
	if buf == nil {
		buf = new(slotCallsBuf[T])
	}
	calls := buf.get(len(as))
	for i, a := range as {
		s := a.K.Shape // [B, G, L, HS]
		c := calls[i]
		c.init(a, ps[i])
		c.tk, c.nkt = tk[i], (tk[i]+attnKTile-1)/attnKTile
		c.kvStr = [3]int{s[1] * s[2] * s[3], s[2] * s[3], s[3]}
	}
	attnBatch(calls)
	clear(buf.all) // drop the operands
	slotCalls.Put(buf)
}

// slotCalls recycles the calls of AttentionSlots (a *slotCallsBuf of either compute
// type): a decode step makes one a sequence and layer, and memory the Go heap hands out
// fresh costs a page fault per 4 KiB (13 µs in a VM), more than the call's arithmetic.
var slotCalls sync.Pool

// slotCallsBuf is the calls of one AttentionSlots and pointers to them.
type slotCallsBuf[T float] struct {
	all  []attnCall[T]
	ptrs []*attnCall[T]
}

// get returns n calls, to be set up by init.
func (b *slotCallsBuf[T]) get(n int) []*attnCall[T] {
	if cap(b.all) < n {
		b.all, b.ptrs = make([]attnCall[T], n), make([]*attnCall[T], n)
	}
	b.all, b.ptrs = b.all[:n], b.ptrs[:n]
	for i := range b.all {
		b.ptrs[i] = &b.all[i]
	}
	return b.ptrs
}
