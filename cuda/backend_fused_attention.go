package cuda

import "megago/tensor"

// tensor.AttentionKernels on the CUDA backend: attention.cu's flash kernels
// (fused_attention.go) for q in bf16 or f32 with a head size they are built for (8, 16,
// 32, 64, 128), covering grouped-query attention (G < NH), Tq ≠ Tk with the seam's causal
// rule, a padding Mask (any dtype and broadcast), document Segments, an additive Bias
// (T5) with its gradient, attention dropout with the CPU backend's mask bits, the
// log-sum-exp output and its gradient (DLSE), and keys and values read in place from
// KV-cache slots (AttentionSlots, a decode step's attention). The other cases, F16 or F64
// operands and other head sizes, still run the host fallback (host_fallback.go: the
// operands are copied to host memory, the CPU backend's kernel runs on them and the
// outputs are copied back, slow but bit for bit the CPU's results). The bias gradient
// goes through a buffer of the logits' gradient [B, NH, Tq, Tk] (F32) for the backward's
// duration.

// Attention runs flash_fwd when flashCovers a, else the host fallback.
func (b *Backend) Attention(a tensor.AttentionArgs, p tensor.AttentionParams) {
	if flashCovers(a) {
		b.flashAttention(a.Out, a.LSE, a.Q, a.K, a.V, b.flashParams(a, p))
		return
	}
	h := b.hostRun()
	h.cpu.Attention(tensor.AttentionArgs{Q: h.in(a.Q), K: h.in(a.K), V: h.in(a.V), Mask: h.in(a.Mask),
		Bias: h.in(a.Bias), Segments: h.in(a.Segments), Out: h.out(a.Out), LSE: h.out(a.LSE)}, p)
	h.done()
}

// AttentionSlots implements tensor.SlotAttentionKernels: flash_fwd reads the first tk[i]
// positions of each call's key/value slots [B, G, L, HS] in place (a head's positions
// L·HS apart), with no copy of them; the kernel and its values are Attention's over those
// positions. Calls that differ only in their queries' and keys' counts (a decode step's:
// one model, one cache) run as one launch (flashAttentionSlots), others one launch each.
// Calls the flash kernels do not cover run the host fallback on copies of their slots.
func (b *Backend) AttentionSlots(as []tensor.AttentionArgs, ps []tensor.AttentionParams, tk []int) {
	if len(as) == 0 {
		return
	}
	if !flashCovers(as[0]) { // every call has the first's dtype and head size
		for i, a := range as {
			h := b.hostRun()
			h.cpu.(tensor.SlotAttentionKernels).AttentionSlots([]tensor.AttentionArgs{{Q: h.in(a.Q), K: h.in(a.K),
				V: h.in(a.V), Out: h.out(a.Out), LSE: h.out(a.LSE)}}, ps[i:i+1], tk[i:i+1])
			h.done()
		}
		return
	}
	if slotsAlike(as, ps) {
		b.flashAttentionSlots(as, ps[0], tk)
		return
	}
	for i, a := range as {
		f := newFlashParams(a.Q, a.K, ps[i])
		f.tk, f.lkv = int64(tk[i]), int64(a.K.Shape[2]) // the first tk[i] of the slots' L positions
		b.flashAttention(a.Out, a.LSE, a.Q, a.K, a.V, f)
	}
}

// slotsAlike reports whether the calls as, ps share what one launch of flash_fwd_slots
// shares: the queries' batch and heads, the slots' shape, the scale and causality.
func slotsAlike(as []tensor.AttentionArgs, ps []tensor.AttentionParams) bool {
	q0, k0 := as[0].Q.Shape, as[0].K.Shape
	for i, a := range as {
		sameQ := a.Q.Shape[0] == q0[0] && a.Q.Shape[1] == q0[1]
		if !sameQ || !a.K.Shape.Equal(k0) || ps[i].Scale != ps[0].Scale || ps[i].Causal != ps[0].Causal {
			return false
		}
	}
	return true
}

// AttentionBackward runs the flash backward kernels when flashCovers a, else the host
// fallback.
func (b *Backend) AttentionBackward(a tensor.AttentionArgs, g tensor.AttentionGrads, p tensor.AttentionParams) {
	if flashCovers(a) {
		b.flashAttentionBackward(g.DQ, g.DK, g.DV, g.DBias, a.Q, a.K, a.V, a.Out, a.LSE, g.DOut, g.DLSE, b.flashParams(a, p))
		return
	}
	h := b.hostRun()
	ha := tensor.AttentionArgs{Q: h.in(a.Q), K: h.in(a.K), V: h.in(a.V), Mask: h.in(a.Mask), Bias: h.in(a.Bias),
		Segments: h.in(a.Segments), Out: h.in(a.Out), LSE: h.in(a.LSE)}
	hg := tensor.AttentionGrads{DOut: h.in(g.DOut), DLSE: h.in(g.DLSE),
		DQ: h.out(g.DQ), DK: h.out(g.DK), DV: h.out(g.DV), DBias: h.out(g.DBias)}
	h.cpu.AttentionBackward(ha, hg, p)
	h.done()
}
