package tensor

import "fmt"

// CachedAttentionBatchKernels is implemented by a backend that computes several
// AttentionCached calls in one pass.
type CachedAttentionBatchKernels interface {
	// AttentionCachedBatch is CachedAttentionKernels.AttentionCached for each as[i] with
	// ps[i]: the same outputs bit for bit. All the calls have one dtype and head size.
	AttentionCachedBatch(as []AttentionArgs, ps []AttentionParams)
}

// AttentionCachedBatch returns AttentionCached(qs[i], ks[i], vs[i], o) for every i, the
// same values bit for bit: the attention of several sequences, each over its own keys
// and values (a continuous batch's, each in its KV-cache slot). Where the backend
// implements CachedAttentionBatchKernels (the CPU backend does) the heads of all the
// calls are the items of one parallel pass, so that many small calls (a decode step's:
// one query per sequence) do not each start and join goroutines; otherwise it makes the
// calls one by one. For inference: it records no gradient.
//
// It panics if the slices' lengths differ, if the tensors are not all of one dtype, head
// size and device, or where AttentionCached would.
func AttentionCachedBatch(qs, ks, vs []*Tensor, o AttentionOptions) []*Tensor {
	if len(ks) != len(qs) || len(vs) != len(qs) {
		panic(fmt.Sprintf("tensor: AttentionCachedBatch: %d queries, %d keys, %d values", len(qs), len(ks), len(vs)))
	}
	if len(qs) == 0 {
		return nil
	}
	dev := qs[0].Device()
	bk, ok := dev.backend.(CachedAttentionBatchKernels)
	outs := make([]*Tensor, len(qs))
	if !ok {
		for i := range qs {
			outs[i] = AttentionCached(qs[i], ks[i], vs[i], o)
		}
		return outs
	}
	args, ps := make([]AttentionArgs, len(qs)), make([]AttentionParams, len(qs))
	lses := make([]*Tensor, len(qs))
	for i, q := range qs {
		k, v := ks[i], vs[i]
		checkCached("AttentionCachedBatch", k, v, o)
		checkLikeFirst("AttentionCachedBatch", qs, i)
		args[i], ps[i], outs[i], lses[i] = cachedCall("AttentionCachedBatch", q, k, v, o)
	}
	bk.AttentionCachedBatch(args, ps)
	for _, l := range lses {
		l.Release()
	}
	return outs
}

// checkLikeFirst panics, naming op, if qs[i] differs from qs[0] in device, dtype or head
// size (last dim).
func checkLikeFirst(op string, qs []*Tensor, i int) {
	q, q0 := qs[i], qs[0]
	dt, hs := q0.dtype, q0.shape[len(q0.shape)-1]
	if q.Device() != q0.Device() || q.dtype != dt || q.shape[len(q.shape)-1] != hs {
		panic(fmt.Sprintf("tensor: %s: q %d %v %v on %v after q 0 %v [.., %d] on %v", op, i, q.dtype, q.shape, q.Device(), dt, hs, q0.Device()))
	}
}
