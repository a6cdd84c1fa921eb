package cuda

import "megago/tensor"

// tensor.AttentionKernels on the CUDA backend: attention.cu's flash kernels
// (fused_attention.go) for q in bf16 or f32 with a head size they are built for (8, 16,
// 32, 64, 128), covering grouped-query attention (G < NH), Tq ≠ Tk with the seam's causal
// rule, a padding Mask (any dtype and broadcast), document Segments, an additive Bias
// (T5) with its gradient, attention dropout with the CPU backend's mask bits, and the
// log-sum-exp output and its gradient (DLSE). The other cases, F16 or F64 operands and
// other head sizes, still run the host fallback (host_fallback.go: the operands are
// copied to host memory, the CPU backend's kernel runs on them and the outputs are copied
// back, slow but bit for bit the CPU's results). The bias gradient goes through a buffer
// of the logits' gradient [B, NH, Tq, Tk] (F32) for the backward's duration.

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
