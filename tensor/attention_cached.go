package tensor

import "fmt"

// Attention over a KV cache in its own layout (AttentionCached) and the optional kernel
// a backend implements for it (CachedAttentionKernels).

// CachedAttentionKernels is implemented by a backend whose fused attention forward can
// read keys and values stored position-major, [B, Tk, G, HS] (a KV cache's layout, in
// which a sequence's new positions are a contiguous range), in place.
type CachedAttentionKernels interface {
	// AttentionCached is AttentionKernels.Attention for a.K and a.V of shape
	// [B, Tk, G, HS]: the same a.Out and a.LSE, bit for bit, as Attention over their
	// [B, G, Tk, HS] permutation.
	AttentionCached(a AttentionArgs, p AttentionParams)
}

// AttentionCached returns Attention(q, k.Permute(0, 2, 1, 3), v.Permute(0, 2, 1, 3), o)'s
// out [B, NH, Tq, HS] for keys and values stored position-major, k, v [B, Tk, G, HS], as
// a KV cache holds them (nn.SlotCache): the same values bit for bit, without the copies
// where the backend implements CachedAttentionKernels (the CPU backend does; others take
// the permutation and their Attention). For inference: it records no gradient, and o may
// set only Scale and Causal.
//
// It panics if q is not [B, NH, Tq, HS] and k, v [B, Tk, G, HS] of one float dtype on
// one device with NH a multiple of G, or if o sets anything but Scale and Causal.
func AttentionCached(q, k, v *Tensor, o AttentionOptions) *Tensor {
	checkCached("AttentionCached", k, v, o)
	dev := q.Device()
	ck, ok := dev.backend.(CachedAttentionKernels)
	if !ok {
		var out *Tensor
		dev.NoGrad(func() { out, _ = Attention(q, k.Permute(0, 2, 1, 3), v.Permute(0, 2, 1, 3), o) })
		return out
	}
	a, p, out, lse := cachedCall("AttentionCached", q, k, v, o)
	defer lse.Release()
	ck.AttentionCached(a, p)
	return out
}

// cachedCall checks a fused call of AttentionCached (or AttentionCachedBatch, op) on
// q, k, v and o, counts it, and returns its arguments and parameters with its new
// outputs out [B, NH, Tq, HS] and lse [B, NH, Tq].
func cachedCall(op string, q, k, v *Tensor, o AttentionOptions) (a AttentionArgs, p AttentionParams, out, lse *Tensor) {
	hm := Shape{k.shape[0], k.shape[2], k.shape[1], k.shape[3]} // [B, G, Tk, HS]
	p = checkAttention(op, q, k.view(0, hm), v.view(0, hm), o)
	out, lse = fusedAttnOutputs(q)
	return AttentionArgs{Q: q.Span(), K: k.Span(), V: v.Span(), Out: out.Span(), LSE: lse.Span()}, p, out, lse
}

// fusedAttnOutputs counts a fused attention call on q's device and returns its outputs
// out [B, NH, Tq, HS] (q's dtype) and lse [B, NH, Tq] (its compute dtype), uninitialised.
func fusedAttnOutputs(q *Tensor) (out, lse *Tensor) {
	dev := q.Device()
	dev.countFused(FusedAttention)
	return empty(dev, q.dtype, q.shape), empty(dev, q.dtype.Compute(), q.shape[:3])
}

// checkCached panics, naming op, if o sets anything but Scale and Causal or if k or v
// is not of rank 4 ([B, Tk, G, HS]).
func checkCached(op string, k, v *Tensor, o AttentionOptions) {
	if o.Mask != nil || o.Bias != nil || o.Segments != nil || o.Dropout != 0 || o.DropoutFull != nil || o.DropoutStart != nil {
		panic(fmt.Sprintf("tensor: %s: options other than Scale and Causal", op))
	}
	if k.Rank() != 4 || v.Rank() != 4 {
		panic(fmt.Sprintf("tensor: %s: k %v, v %v: want [B, Tk, G, HS]", op, k.shape, v.shape))
	}
}
