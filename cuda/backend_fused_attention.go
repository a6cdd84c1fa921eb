package cuda

import "megago/tensor"

// tensor.AttentionKernels on the CUDA backend. For now a host fallback that is correct but
// slow: the operands are copied to host memory, the CPU backend's kernel runs on them
// (bit for bit the CPU backend's results) and the outputs are copied back. The GPU kernels
// (Backend.FlashAttention and FlashAttentionBackward, fused_attention.go) are routed
// through this seam in the next issue, once they cover masks, bias, dropout, GQA and
// Tq ≠ Tk.

// Attention runs the CPU backend's kernel on host copies of the operands.
func (b *Backend) Attention(a tensor.AttentionArgs, p tensor.AttentionParams) {
	h := b.hostRun()
	h.cpu.Attention(tensor.AttentionArgs{Q: h.in(a.Q), K: h.in(a.K), V: h.in(a.V), Mask: h.in(a.Mask),
		Bias: h.in(a.Bias), Segments: h.in(a.Segments), Out: h.out(a.Out), LSE: h.out(a.LSE)}, p)
	h.done()
}

// AttentionBackward runs the CPU backend's kernel on host copies of the operands.
func (b *Backend) AttentionBackward(a tensor.AttentionArgs, g tensor.AttentionGrads, p tensor.AttentionParams) {
	h := b.hostRun()
	ha := tensor.AttentionArgs{Q: h.in(a.Q), K: h.in(a.K), V: h.in(a.V), Mask: h.in(a.Mask), Bias: h.in(a.Bias),
		Segments: h.in(a.Segments), Out: h.in(a.Out), LSE: h.in(a.LSE)}
	hg := tensor.AttentionGrads{DOut: h.in(g.DOut), DLSE: h.in(g.DLSE),
		DQ: h.out(g.DQ), DK: h.out(g.DK), DV: h.out(g.DV), DBias: h.out(g.DBias)}
	h.cpu.AttentionBackward(ha, hg, p)
	h.done()
}
