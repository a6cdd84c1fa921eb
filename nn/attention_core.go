package nn

import (
	"math"

	"megago/parallel"
	"megago/tensor"
)

// The attention core is softmax(scale·q·kᵀ + bias, masked)·v with attention dropout: the
// part of an attention layer between its projections. A layer chooses how to compute it
// when it is built (attentionCore): tensor's fused Attention, which never holds the
// [B, NH/tp, Tq, Tk] scores (the default), or the unfused composition of ordinary ops
// that defines it (Builder.Unfused), optionally recomputed in backward
// (RecomputeSelective).

// attendFunc computes attention from q [B, NH/tp, Tq, HS] and this rank's key and value
// groups k, v [B, G/tp, Tk, HS], and returns [B, Tq, NH·HS/tp].
type attendFunc func(p *Pass, q, k, v *tensor.Tensor, m AttentionMask, a attnSpec) *tensor.Tensor

// attentionCore returns how attention layers built with b compute their core: fused, or
// unfused with b.Unfused; recomputed in backward under RecomputeSelective.
func attentionCore(b *Builder) attendFunc {
	core := fusedAttend
	if b.Unfused {
		core = attend
	}
	if b.Recompute == RecomputeSelective {
		return recomputed(core)
	}
	return core
}

// attnSpec is what an attention core needs besides its inputs, fixed when the layer is
// built.
type attnSpec struct {
	scale   float64 // of the scores: 1/√HS, or 1 with NoAttentionScale (T5)
	dropout float64 // of the probabilities (AttnDropout)
	per     int     // query heads per key/value group, NH/G
	// key names the probabilities' dropout site, name+".probs.dropout". It differs from
	// the layer's residual dropout after this attention, "<layer>.attn.dropout"
	// (= name+".dropout"): the two masks must be independent.
	key string
	tp  parallel.Comm
	// unfused: the core is the unfused composition (Builder.Unfused), which DecodeStep
	// also uses (SelfAttention.decode).
	unfused bool
}

// newAttnSpec returns the core's settings of attention layer name built with b and cfg.
func newAttnSpec(b *Builder, name string, cfg TransformerConfig) attnSpec {
	s := attnSpec{scale: 1, dropout: cfg.AttnDropout, per: cfg.Heads / cfg.KVHeads, key: name + ".probs.dropout", tp: b.TP,
		unfused: b.Unfused}
	if !cfg.NoAttentionScale {
		s.scale = 1 / math.Sqrt(float64(cfg.HeadSize))
	}
	return s
}

// fusedAttend is the attention core as tensor.AttentionMerged (tensor.Attention with the
// heads side by side): grouped keys and values are read in place, and the dropout mask is
// the one attend draws for the same probabilities.
func fusedAttend(p *Pass, q, k, v *tensor.Tensor, m AttentionMask, a attnSpec) *tensor.Tensor {
	o := tensor.AttentionOptions{Scale: a.scale, Causal: m.Causal, Mask: m.Masked, Bias: m.Bias, Segments: m.Segments}
	if p.Train && a.dropout > 0 {
		s := q.Shape() // [B, NH/tp, Tq, HS]
		o.Dropout, o.RNG = a.dropout, p.RNG.Named(a.key)
		// The probabilities [B, NH/tp, Tq, Tk] are this rank's heads of the micro-batch's
		// samples, numbered globally as in dropout.
		o.DropoutFull = tensor.Shape{s[0] + p.SampleOffset, s[1] * a.tp.Size(), s[2], k.Dim(2)}
		o.DropoutStart = []int{p.SampleOffset, a.tp.Rank() * s[1], 0, 0}
	}
	out, _ := tensor.AttentionMerged(q, k, v, o) // [B, Tq, NH·HS/tp]: mergeHeads's layout, without its copies
	return out
}

// attend is the unfused attention core, the composition fusedAttend equals: the scores
// [B, NH/tp, Tq, Tk] are computed whole, then softmax, dropout and the product with v.
func attend(p *Pass, q, k, v *tensor.Tensor, m AttentionMask, a attnSpec) *tensor.Tensor {
	k, v = expandGroups(k, a.per), expandGroups(v, a.per) // [B, NH/tp, Tk, HS]
	scale := a.scale
	scores := tensor.MatMulT(q, k, false, true) // [B, NH/tp, Tq, Tk]
	if m.Bias != nil {
		scores = tensor.Add(tensor.Scale(scores, scale), m.Bias)
		scale = 1
	}
	masked := m.Masked
	if m.Segments != nil {
		masked = tensor.SegmentMask(m.Segments, q.Dim(2), masked) // [B, 1 or NH/tp, Tq, Tk]
	}
	probs := tensor.Softmax(scores, tensor.SoftmaxOptions{Scale: scale, Causal: m.Causal, Mask: masked})
	s := probs.Shape()
	full := s.Clone()
	full[1] *= a.tp.Size()
	probs = dropout(p, probs, a.dropout, a.key, full, []int{0, a.tp.Rank() * s[1], 0, 0})
	return mergeHeads(tensor.MatMul(probs, v)) // [B, NH/tp, Tq, HS] → [B, Tq, NH·HS/tp]
}

// mergeHeads lays the heads' outputs [B, NH/tp, Tq, HS] side by side: [B, Tq, NH·HS/tp].
func mergeHeads(ctx *tensor.Tensor) *tensor.Tensor {
	b, nh, tq, hs := ctx.Dim(0), ctx.Dim(1), ctx.Dim(2), ctx.Dim(3)
	return ctx.Permute(0, 2, 1, 3).Reshape(b, tq, nh*hs)
}

// expandGroups repeats each key/value group [B, G/tp, T, HS] for its per query heads,
// giving [B, NH/tp, T, HS].
func expandGroups(x *tensor.Tensor, per int) *tensor.Tensor {
	if per == 1 {
		return x
	}
	b, g, t, hs := x.Dim(0), x.Dim(1), x.Dim(2), x.Dim(3)
	return x.Reshape(b, g, 1, t, hs).Expand(b, g, per, t, hs).Reshape(b, g*per, t, hs)
}
