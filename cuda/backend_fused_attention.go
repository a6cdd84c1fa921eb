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
	h := hostStage{b: b, cpu: tensor.NewCPU().Backend()}
	ha := h.args(a, h.alloc)
	h.cpu.Attention(ha, p)
	h.back(a.Out, ha.Out)
	h.back(a.LSE, ha.LSE)
}

// AttentionBackward runs the CPU backend's kernel on host copies of the operands.
func (b *Backend) AttentionBackward(a tensor.AttentionArgs, g tensor.AttentionGrads, p tensor.AttentionParams) {
	h := hostStage{b: b, cpu: tensor.NewCPU().Backend()}
	hg := tensor.AttentionGrads{DOut: h.in(g.DOut), DLSE: h.in(g.DLSE),
		DQ: h.alloc(g.DQ), DK: h.alloc(g.DK), DV: h.alloc(g.DV), DBias: h.alloc(g.DBias)}
	h.cpu.AttentionBackward(h.args(a, h.in), hg, p)
	h.back(g.DQ, hg.DQ)
	h.back(g.DK, hg.DK)
	h.back(g.DV, hg.DV)
	h.back(g.DBias, hg.DBias)
}

// hostStage moves spans between the device and CPU backend storage.
type hostStage struct {
	b   *Backend
	cpu tensor.Backend
}

// args copies the inputs of a to the host, and stages Out and LSE with outs (alloc for
// the forward, which writes them; in for the backward, which reads them).
func (h hostStage) args(a tensor.AttentionArgs, outs func(tensor.Span) tensor.Span) tensor.AttentionArgs {
	return tensor.AttentionArgs{Q: h.in(a.Q), K: h.in(a.K), V: h.in(a.V), Mask: h.in(a.Mask), Bias: h.in(a.Bias),
		Out: outs(a.Out), LSE: outs(a.LSE)}
}

// alloc returns host storage shaped like s (empty for an empty s), contents undefined.
func (h hostStage) alloc(s tensor.Span) tensor.Span {
	if s.Empty() {
		return s
	}
	return tensor.Span{Buf: h.cpu.Alloc(s.DType, s.Numel()), DType: s.DType, Shape: s.Shape}
}

// in returns a host copy of s (empty for an empty s).
func (h hostStage) in(s tensor.Span) tensor.Span {
	c := h.alloc(s)
	if !s.Empty() {
		buf := make([]byte, s.Numel()*s.DType.Size())
		h.b.ReadHost(s, buf)
		h.cpu.WriteHost(c, buf)
	}
	return c
}

// back copies host span c into device span s (nothing for an empty s).
func (h hostStage) back(s, c tensor.Span) {
	if s.Empty() {
		return
	}
	buf := make([]byte, s.Numel()*s.DType.Size())
	h.cpu.ReadHost(c, buf)
	h.b.WriteHost(s, buf)
}
