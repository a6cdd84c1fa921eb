package tensor

import "fmt"

// Document (segment) masks of the fused attention: AttentionOptions.Segments, its checks,
// and the same mask as a tensor (SegmentMask), which the unfused reference applies.

// checkSegments panics unless segments is I32 [B, Tk] on q's device and Tq ≤ Tk.
func checkSegments(op string, segments, q, k *Tensor) {
	b, tq, tk := q.shape[0], q.shape[2], k.shape[2]
	switch {
	case segments.Device() != q.Device():
		panic(fmt.Sprintf("tensor: %s: segments on %v, q on %v", op, segments.Device(), q.Device()))
	case segments.dtype != I32 || !segments.shape.Equal(Shape{b, tk}):
		panic(fmt.Sprintf("tensor: %s: segments %v %v: want int32 [B, Tk] = [%d %d]", op, segments.dtype, segments.shape, b, tk))
	case tq > tk:
		panic(fmt.Sprintf("tensor: %s: segments with %d queries for %d keys: the queries must be the last keys", op, tq, tk))
	}
}

// SegmentMask returns the mask that segments [B, Tk] (I32) define for tq queries, as
// AttentionOptions.Segments does: F32 [B, 1, Tq, Tk], 1 where key j is hidden from query
// i because Segments[b, j] ≠ Segments[b, i + Tk − Tq]. With mask not nil (any dtype,
// broadcasting with [B, 1, Tq, Tk]) it returns their union, of the broadcast shape: 1
// where either hides the key. It is computed on the host, holds a [Tq, Tk] matrix per
// sample and records no gradient. It panics if segments is not I32 of rank 2, tq exceeds
// Tk, or mask does not broadcast.
func SegmentMask(segments *Tensor, tq int, mask *Tensor) *Tensor {
	if segments.dtype != I32 || segments.Rank() != 2 || tq > segments.shape[1] || tq < 0 {
		panic(fmt.Sprintf("tensor: SegmentMask: segments %v %v for %d queries: want int32 [B, Tk] with Tk ≥ %d", segments.dtype, segments.shape, tq, tq))
	}
	b, tk := segments.shape[0], segments.shape[1]
	seg := ToSlice[int32](segments)
	shape := Shape{b, 1, tq, tk}
	var hidden []float64 // mask's values broadcast to shape
	if mask != nil {
		s, ok := Broadcast(mask.shape, shape)
		if !ok {
			panic(fmt.Sprintf("tensor: SegmentMask: mask %v does not broadcast with %v", mask.shape, shape))
		}
		shape = s
		mask.Device().NoGrad(func() { hidden = ToSlice[float64](mask.Detach().Expand(shape...)) })
	}
	out := make([]float32, shape.Numel())
	perB := shape.Numel() / b // elements of one sample: [NH, Tq, Tk] with NH from mask, else 1
	for bi := range b {
		for e := range perB {
			i, j := e/tk%tq, e%tk
			n := bi*perB + e
			if seg[bi*tk+j] != seg[bi*tk+i+tk-tq] || hidden != nil && hidden[n] != 0 {
				out[n] = 1
			}
		}
	}
	return FromSlice(segments.Device(), out, shape...)
}
