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
	dev, dt, hs := qs[0].Device(), qs[0].dtype, qs[0].shape[len(qs[0].shape)-1]
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
		if q.Device() != dev || q.dtype != dt || q.shape[len(q.shape)-1] != hs {
			panic(fmt.Sprintf("tensor: AttentionCachedBatch: q %d %v %v on %v after q 0 %v [.., %d] on %v", i, q.dtype, q.shape, q.Device(), dt, hs, dev))
		}
		args[i], ps[i], outs[i], lses[i] = cachedCall("AttentionCachedBatch", q, k, v, o)
	}
	bk.AttentionCachedBatch(args, ps)
	for _, l := range lses {
		l.Release()
	}
	return outs
}
