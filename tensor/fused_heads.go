package tensor

import "fmt"

// SplitHeads: a fused QKV projection cut into attention heads in one pass, its optional
// kernel (HeadKernels) and the composition that defines it (SplitHeadsReference).
//
// Shapes: the projection qkv [B, T, G·(per+2)·HS] is laid out per key/value group, as
// Megatron lays out its fused weight: for each of the G groups, its per query heads, then
// its key head, then its value head, HS features each. The heads come out as
// q [B, G·per, T, HS] and k, v [B, G, T, HS].

// HeadKernels is implemented by a backend that cuts a float32 projection into heads in one
// pass (the CPU backend does). Others run SplitHeadsReference's ops.
type HeadKernels interface {
	// SplitHeads sets q [B, G·per, T, HS], k and v [B, G, T, HS] from qkv
	// [B, T, G·(per+2)·HS] plus bias [G·(per+2)·HS] (empty: none), all F32: each element
	// the float32 sum of its projection element and bias, as Binary's OpAdd rounds it.
	SplitHeads(q, k, v, qkv, bias Span, per int)
	// SplitHeadsBackward sets dqkv [B, T, G·(per+2)·HS] from dq, dk, dv, the inverse
	// layout change (F32).
	SplitHeadsBackward(dqkv, dq, dk, dv Span, per int)
}

// SplitHeads returns the queries q [B, G·per, T, HS] and the keys and values k, v
// [B, G, T, HS] of a fused projection qkv [B, T, G·(per+2)·HS] (see above) plus its bias
// ([G·(per+2)·HS], or nil), in one pass over memory where the backend implements
// HeadKernels for qkv's dtype (the CPU backend for F32); its backward writes qkv's gradient
// in one pass too, and the bias's as Add's backward sums it. The result, values and
// gradients, is SplitHeadsReference's bit for bit. It panics if qkv is not a float
// tensor [B, T, G·(per+2)·HS] with per ≥ 1, or bias does not match it.
func SplitHeads(qkv, bias *Tensor, groups, hs int) (q, k, v *Tensor) {
	b, t, per := checkSplitHeads("SplitHeads", qkv, bias, groups, hs)
	dev := qkv.Device()
	hk, ok := dev.backend.(HeadKernels)
	if !ok || qkv.dtype != F32 {
		return SplitHeadsReference(qkv, bias, groups, hs)
	}
	q, k, v = empty(dev, F32, Shape{b, groups * per, t, hs}), empty(dev, F32, Shape{b, groups, t, hs}), empty(dev, F32, Shape{b, groups, t, hs})
	hk.SplitHeads(q.Span(), k.Span(), v.Span(), qkv.Span(), spanOrEmpty(bias), per)
	shape := qkv.shape
	record("SplitHeads", []*Tensor{q, k, v}, []*Tensor{qkv, bias}, func(gys []*Tensor) []*Tensor {
		d := empty(dev, F32, shape)
		hk.SplitHeadsBackward(d.Span(), gys[0].Span(), gys[1].Span(), gys[2].Span(), per)
		var db *Tensor
		if needsGrad(bias) {
			db = sumTo(d, bias.shape) // as Add's backward
		}
		return []*Tensor{d, db}
	})
	return q, k, v
}

// SplitHeadsReference is SplitHeads's composition of ordinary ops, which defines its
// result: Add(qkv, bias) (without bias, qkv), reshaped to [B, T, G, per+2, HS], permuted
// to [B, G, per+2, T, HS], split along dim 2 into per, 1 and 1 heads, each reshaped.
func SplitHeadsReference(qkv, bias *Tensor, groups, hs int) (q, k, v *Tensor) {
	b, t, per := checkSplitHeads("SplitHeadsReference", qkv, bias, groups, hs)
	sum := qkv
	if bias != nil {
		sum = Add(qkv, bias)
	}
	heads := sum.Reshape(b, t, groups, per+2, hs).Permute(0, 2, 3, 1, 4) // [B, G, per+2, T, HS]
	parts := Split(heads, 2, per, 1, 1)
	q, k, v = parts[0].Reshape(b, groups*per, t, hs), parts[1].Reshape(b, groups, t, hs), parts[2].Reshape(b, groups, t, hs)
	// The sum and the permuted copy are consumed (Add's and Permute's backward read only
	// shapes) unless the heads are views of them.
	if sum != qkv {
		releaseUnshared(sum, q, k, v)
	}
	releaseUnshared(heads, q, k, v)
	return q, k, v
}

// releaseUnshared releases t unless one of live shares its storage.
func releaseUnshared(t *Tensor, live ...*Tensor) {
	for _, u := range live {
		if t.SharesStorage(u) {
			return
		}
	}
	t.Release()
}

// checkSplitHeads panics, naming op, unless qkv is a float [B, T, G·(per+2)·HS] with
// per ≥ 1 and bias nil or [G·(per+2)·HS] of its dtype and device; it returns B, T, per.
func checkSplitHeads(op string, qkv, bias *Tensor, groups, hs int) (b, t, per int) {
	if len(qkv.shape) != 3 || !qkv.dtype.IsFloat() || groups < 1 || hs < 1 || qkv.shape[2]%(groups*hs) != 0 ||
		qkv.shape[2]/(groups*hs) < 3 {
		panic(fmt.Sprintf("tensor: %s: projection %v %v is not [B, T, G·(per+2)·HS] for G %d, HS %d, per ≥ 1",
			op, qkv.dtype, qkv.shape, groups, hs))
	}
	if bias != nil {
		checkSame(op, qkv, bias)
		if len(bias.shape) != 1 || bias.shape[0] != qkv.shape[2] {
			panic(fmt.Sprintf("tensor: %s: bias %v for projection %v: want [%d]", op, bias.shape, qkv.shape, qkv.shape[2]))
		}
	}
	return qkv.shape[0], qkv.shape[1], qkv.shape[2]/(groups*hs) - 2
}
