package tensor

import "math"

// AttentionReference is Attention computed by the composition of ordinary ops that
// defines it (nn's attention before the fused op), holding the scores and probabilities
// [B, NH, Tq, Tk] of every head:
//
//	k, v   = each key/value head repeated for its NH/G query heads   [B, NH, Tk, HS]
//	scores = q·kᵀ                                                    [B, NH, Tq, Tk]
//	with a Bias: x = scores·Scale + Bias, s = 1; else x = scores, s = Scale
//	Mask   = SegmentMask(Segments, Tq, Mask) with Segments
//	probs  = Softmax(x, {Scale: s, Causal, Mask})                    masked keys → 0
//	probs  = DropoutRegion(probs, Dropout, RNG, DropoutFull, DropoutStart)
//	out    = probs·v                                                 [B, NH, Tq, HS]
//	lse    = M + ln Σⱼ e^(s·xⱼ − M) over the unmasked keys            [B, NH, Tq]
//
// with M a constant per row (its largest unmasked s·xⱼ, or 0 when every key is masked,
// which makes lse −∞). Both results have q's dtype. Tests compare backends' Attention with
// it; it is slower and uses memory quadratic in T. lse's gradient is NaN on a row whose
// keys are all masked (ln 0). It panics as Attention does, and if Tk is 0.
func AttentionReference(q, k, v *Tensor, o AttentionOptions) (out, lse *Tensor) {
	p := checkAttention("AttentionReference", q, k, v, o)
	if o.Segments != nil {
		o.Mask, o.Segments = SegmentMask(o.Segments, q.shape[2], o.Mask), nil // [B, NH or 1, Tq, Tk]
	}
	out, x, s := attendUnfused(q, k, v, o, p)
	logits := Scale(x, s)
	if o.Mask != nil {
		logits = MaskedFill(logits, o.Mask, math.Inf(-1))
	}
	if o.Causal {
		logits = MaskedFill(logits, causalHidden(q.Device(), x.shape[2], x.shape[3]), math.Inf(-1))
	}
	m := rowMaxConstant(logits)                                            // [B, NH, Tq, 1]
	lse = Add(Log(Sum(Exp(Sub(logits, m)), 3)), m.Reshape(m.shape[:3]...)) // [B, NH, Tq]
	return out, lse
}

// attendUnfused returns the output of AttentionReference, and the scores x [B, NH, Tq, Tk]
// and scale s of its softmax.
func attendUnfused(q, k, v *Tensor, o AttentionOptions, p AttentionParams) (out, x *Tensor, s float64) {
	per := q.shape[1] / k.shape[1]
	k, v = repeatHeads(k, per), repeatHeads(v, per)
	x, s = MatMulT(q, k, false, true), p.Scale // [B, NH, Tq, Tk]
	if o.Bias != nil {
		x, s = Add(Scale(x, p.Scale), o.Bias), 1
	}
	probs := Softmax(x, SoftmaxOptions{Scale: s, Causal: o.Causal, Mask: o.Mask})
	if o.Dropout > 0 {
		probs = DropoutRegion(probs, o.Dropout, o.RNG, p.Full, p.Start)
	}
	return MatMul(probs, v), x, s // [B, NH, Tq, HS]
}

// repeatHeads repeats each head of x [B, G, T, HS] for per consecutive heads:
// [B, G·per, T, HS].
func repeatHeads(x *Tensor, per int) *Tensor {
	if per == 1 {
		return x
	}
	b, g, t, hs := x.shape[0], x.shape[1], x.shape[2], x.shape[3]
	return x.Reshape(b, g, 1, t, hs).Expand(b, g, per, t, hs).Reshape(b, g*per, t, hs)
}

// causalHidden returns the F32 [tq, tk] mask that is 1 where key j is hidden from query
// i: j > i + tk − tq.
func causalHidden(dev *Device, tq, tk int) *Tensor {
	m := make([]float32, tq*tk)
	for i := 0; i < tq; i++ {
		for j := max(0, i+tk-tq+1); j < tk; j++ {
			m[i*tk+j] = 1
		}
	}
	return FromSlice(dev, m, tq, tk)
}

// rowMaxConstant returns the largest element of each row of x [B, NH, Tq, Tk] as a
// constant (no gradient) [B, NH, Tq, 1], 0 for a row that is all −∞.
func rowMaxConstant(x *Tensor) *Tensor {
	var m []float64
	x.Device().NoGrad(func() {
		mx, _ := Max(x.Detach(), 3)
		m = ToSlice[float64](mx)
	})
	for i, v := range m {
		if math.IsInf(v, -1) {
			m[i] = 0
		}
	}
	return castRaw(FromSlice(x.Device(), m, x.shape[0], x.shape[1], x.shape[2], 1), x.dtype)
}
