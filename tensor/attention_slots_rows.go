package tensor

import "fmt"

// AttentionSlotsRows is AttentionSlotsInto for a decode step of one-token sequences taken
// whole: sequence i's query is row i of q [1, N, NH, HS], and its output, over the first
// n[i] positions of its slots ks[i], vs[i] [1, G, L, HS], goes to row i of out
// [1, N, NH·HS] (the output projection's input). The values are AttentionSlotsInto's bit
// for bit with qs[i], outs[i] the rows' views [1, NH, 1, HS]; but no view is made per
// sequence, and where the backend implements SlotAttentionKernels nothing is allocated
// per sequence (in a process that seldom collects garbage, each fresh page of the Go heap
// costs a page fault, more than the small objects' use).
//
// It panics if the lengths of ks, vs and n are not N, if q is not [1, N, NH, HS] or out
// not [1, N, NH·HS] of q's dtype and device, if a slot is not [1, G, L, HS] of q's float
// dtype, head size and device with NH a multiple of G, if an n[i] is outside [1, L], or
// if o sets anything but Scale and Causal.
func AttentionSlotsRows(out, q *Tensor, ks, vs []*Tensor, n []int, o AttentionOptions) {
	nseq := len(ks)
	if len(vs) != nseq || len(n) != nseq || q.Rank() != 4 || q.shape[0] != 1 || q.shape[1] != nseq {
		panic(fmt.Sprintf("tensor: AttentionSlotsRows: q %v for %d keys, %d values, %d lengths", q.shape, len(ks), len(vs), len(n)))
	}
	nh, hs, dev := q.shape[2], q.shape[3], q.Device()
	if !out.shape.Equal(Shape{1, nseq, nh * hs}) || out.dtype != q.dtype || out.Device() != dev {
		panic(fmt.Sprintf("tensor: AttentionSlotsRows: out %v %v for q %v %v", out.dtype, out.shape, q.dtype, q.shape))
	}
	if nseq == 0 {
		return
	}
	sk, ok := dev.backend.(SlotAttentionKernels)
	if !ok { // the views, and AttentionSlotsInto
		q1, o1 := q.Reshape(nseq, nh, 1, hs), out.Reshape(nseq, nh, 1, hs)
		qs, outs := make([]*Tensor, nseq), make([]*Tensor, nseq)
		for i := range nseq {
			qs[i], outs[i] = q1.Narrow(0, i, 1), o1.Narrow(0, i, 1)
		}
		AttentionSlotsInto(outs, qs, ks, vs, n, o)
		return
	}
	row := Shape{1, nh, 1, hs} // every call's query and output
	checkCached("AttentionSlotsRows", ks[0], vs[0], o)
	used := Shape{1, ks[0].shape[1], 1, hs}
	p := checkAttention("AttentionSlotsRows", q.view(0, row), ks[0].view(0, used), vs[0].view(0, used), o)
	buf := getSlotArgs()
	defer buf.put()
	args, ps := buf.get(nseq)
	qsp, osp := q.Span(), out.Span()
	qsp.Shape, osp.Shape = row, row
	for i, k := range ks {
		checkSlotRow(q, k, vs[i], n[i], i, o)
		ps[i] = p
		args[i] = AttentionArgs{Q: qsp.at(i * nh * hs), K: k.Span(), V: vs[i].Span(), Out: osp.at(i * nh * hs)}
	}
	launchSlots(dev, sk, args, ps, n)
}

// checkSlotRow panics unless k and v are slots [1, G, L, HS] of q [1, N, NH, HS]'s
// dtype, head size and device, NH a multiple of G, of which n ∈ [1, L] positions are
// attended: checkAttention's checks for a one-token sequence, with no views.
func checkSlotRow(q, k, v *Tensor, n, i int, o AttentionOptions) {
	checkCached("AttentionSlotsRows", k, v, o)
	if !k.shape.Equal(v.shape) || k.shape[0] != 1 || k.shape[3] != q.shape[3] || k.shape[1] == 0 || q.shape[2]%k.shape[1] != 0 ||
		k.dtype != q.dtype || v.dtype != q.dtype || k.Device() != q.Device() || v.Device() != q.Device() {
		panic(fmt.Sprintf("tensor: AttentionSlotsRows: slot %d: k %v %v, v %v %v for q %v %v", i, k.dtype, k.shape, v.dtype, v.shape, q.dtype, q.shape))
	}
	if n < 1 || n > k.shape[2] {
		panic(fmt.Sprintf("tensor: AttentionSlotsRows: %d positions of slot %d %v", n, i, k.shape))
	}
}
