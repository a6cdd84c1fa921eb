package tensor

import (
	"fmt"
	"sync"
)

// Attention over the leading positions of head-major KV-cache slots (AttentionSlots) and
// the optional kernel a backend implements for it (SlotAttentionKernels).

// SlotAttentionKernels is implemented by a backend whose fused attention forward can
// read keys and values from head-major slots [B, G, L, HS] of which only the first Tk
// positions are attended, in place.
type SlotAttentionKernels interface {
	// AttentionSlots is AttentionKernels.Attention for each as[i] with ps[i], whose K and
	// V are [B, G, L, HS] slots of which positions [0, tk[i]) are the keys and values:
	// the same outputs bit for bit as Attention over those positions. All the calls have
	// one dtype and head size.
	AttentionSlots(as []AttentionArgs, ps []AttentionParams, tk []int)
}

// AttentionSlots returns, for every i, Attention(qs[i], k, v, o)'s out [B, NH, Tq, HS]
// for k, v = ks[i], vs[i].Narrow(2, 0, n[i]): the attention of several sequences, each
// over the first n[i] positions of its own KV-cache slot ks[i], vs[i] [B, G, L, HS]
// (head-major, so that a key/value head's positions are one contiguous stream), the same
// values bit for bit. Where the backend implements SlotAttentionKernels (the CPU backend
// does) the slots are read in place and the heads of all the calls are the items of one
// parallel pass; otherwise each call takes the narrowed copies and Attention. For
// inference: it records no gradient, and o may set only Scale and Causal.
//
// It panics if the slices' lengths differ, if an n[i] is outside [1, L], if the tensors
// are not all of one float dtype, head size and device, or if q is not [B, NH, Tq, HS]
// and k, v [B, G, L, HS] with NH a multiple of G, or if o sets anything but Scale and
// Causal.
func AttentionSlots(qs, ks, vs []*Tensor, n []int, o AttentionOptions) []*Tensor {
	outs := make([]*Tensor, len(qs))
	for i, q := range qs {
		outs[i] = empty(q.Device(), q.dtype, q.shape)
	}
	AttentionSlotsInto(outs, qs, ks, vs, n, o)
	return outs
}

// AttentionSlotsInto is AttentionSlots writing each output into outs[i], a tensor of
// qs[i]'s shape and dtype: a view of a larger one, for example, so that a decode step's
// one-token sequences write their rows of the output projection's input in place, with
// no concatenation after. It panics as AttentionSlots does, and if an outs[i] differs
// from qs[i] in shape, dtype or device.
func AttentionSlotsInto(outs, qs, ks, vs []*Tensor, n []int, o AttentionOptions) {
	if len(ks) != len(qs) || len(vs) != len(qs) || len(n) != len(qs) || len(outs) != len(qs) {
		panic(fmt.Sprintf("tensor: AttentionSlots: %d queries, %d keys, %d values, %d lengths, %d outputs", len(qs), len(ks), len(vs), len(n), len(outs)))
	}
	if len(qs) == 0 {
		return
	}
	dev := qs[0].Device()
	buf := getSlotArgs()
	defer buf.put()
	args, ps := buf.get(len(qs))
	for i, q := range qs {
		k, v := ks[i], vs[i]
		checkCached("AttentionSlots", k, v, o)
		checkLikeFirst("AttentionSlots", qs, i)
		if n[i] < 1 || n[i] > k.shape[2] {
			panic(fmt.Sprintf("tensor: AttentionSlots: %d positions of slot %d %v", n[i], i, k.shape))
		}
		if !outs[i].shape.Equal(q.shape) || outs[i].dtype != q.dtype || outs[i].Device() != dev {
			panic(fmt.Sprintf("tensor: AttentionSlots: output %d %v %v for queries %v %v", i, outs[i].dtype, outs[i].shape, q.dtype, q.shape))
		}
		used := Shape{k.shape[0], k.shape[1], n[i], k.shape[3]} // [B, G, Tk, HS]
		ps[i] = checkAttention("AttentionSlots", q, k.view(0, used), v.view(0, used), o)
		args[i] = AttentionArgs{Q: q.Span(), K: k.Span(), V: v.Span(), Out: outs[i].Span()}
	}
	sk, ok := dev.backend.(SlotAttentionKernels)
	if !ok {
		for i, q := range qs {
			dev.NoGrad(func() {
				out, _ := Attention(q, ks[i].Narrow(2, 0, n[i]), vs[i].Narrow(2, 0, n[i]), o)
				outs[i].CopyFrom(out)
				out.Release()
			})
		}
		return
	}
	launchSlots(dev, sk, args, ps, n)
}

// launchSlots runs sk.AttentionSlots on args, whose Q, K, V and Out are set, with one
// buffer for every call's log-sum-exps (which nobody reads).
func launchSlots(dev *Device, sk SlotAttentionKernels, args []AttentionArgs, ps []AttentionParams, n []int) {
	rows := 0 // of the log-sum-exps, B·NH·Tq a call
	for _, a := range args {
		rows += a.Q.Shape[:3].Numel()
	}
	lse := empty(dev, args[0].Q.DType.Compute(), Shape{rows})
	off := 0
	for i := range args {
		dev.countFused(FusedAttention)
		args[i].LSE = lse.Span().at(off)
		args[i].LSE.Shape = args[i].Q.Shape[:3]
		off += args[i].Q.Shape[:3].Numel()
	}
	sk.AttentionSlots(args, ps, n)
	lse.Release()
}

// slotArgs recycles AttentionSlotsInto's kernel arguments (a *slotArgsBuf), as
// slotCalls does its CPU calls.
var slotArgs sync.Pool

// slotArgsBuf is the arguments of one AttentionSlotsInto's calls.
type slotArgsBuf struct {
	args []AttentionArgs
	ps   []AttentionParams
}

// getSlotArgs returns a slotArgsBuf from slotArgs, or a new one.
func getSlotArgs() *slotArgsBuf {
	if b, _ := slotArgs.Get().(*slotArgsBuf); b != nil {
		return b
	}
	return new(slotArgsBuf)
}

// get returns room for n calls' arguments.
func (b *slotArgsBuf) get(n int) ([]AttentionArgs, []AttentionParams) {
	if cap(b.args) < n {
		b.args, b.ps = make([]AttentionArgs, n), make([]AttentionParams, n)
	}
	b.args, b.ps = b.args[:n], b.ps[:n]
	return b.args, b.ps
}

// put drops the arguments' references and hands b back to slotArgs.
func (b *slotArgsBuf) put() {
	clear(b.args)
	clear(b.ps)
	slotArgs.Put(b)
}
