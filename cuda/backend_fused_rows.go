package cuda

import "megago/tensor"

// The row-wise fused kernels of tensor.RowKernels (residual + norm, bias + GeLU, bias +
// SwiGLU, bias + dropout + residual, rotary embedding), for now a correct fallback: each
// method copies its input spans to host memory, runs the CPU backend's kernel there and
// copies its outputs back, so the results are bit for bit the CPU backend's. This file is
// the seam through which this backend's own kernels (fused.go: BiasGeLU, BiasDropoutAdd,
// AddLayerNorm/AddRMSNorm with their backward, RoPE) are routed in the next issue; until
// then a model that takes the fused path on this backend is correct but pays two
// host↔device copies per call.

// hostRowRun is one fallback call: the CPU backend and the outputs to copy back.
type hostRowRun struct {
	b    *Backend
	cpu  tensor.Backend
	outs [][2]tensor.Span // device span, host span
}

func (b *Backend) hostRowRun() *hostRowRun {
	return &hostRowRun{b: b, cpu: tensor.NewCPU().Backend()}
}

// alloc returns host storage shaped like s (empty for an empty s).
func (h *hostRowRun) alloc(s tensor.Span) tensor.Span {
	if s.Empty() {
		return s
	}
	return tensor.Span{Buf: h.cpu.Alloc(s.DType, s.Numel()), DType: s.DType, Shape: s.Shape}
}

// in returns a host copy of the device span s.
func (h *hostRowRun) in(s tensor.Span) tensor.Span {
	hs := h.alloc(s)
	if !s.Empty() {
		buf := make([]byte, s.Numel()*s.DType.Size())
		h.b.ReadHost(s, buf)
		h.cpu.WriteHost(hs, buf)
	}
	return hs
}

// out returns host storage for the device output s, copied back to s by done.
func (h *hostRowRun) out(s tensor.Span) tensor.Span {
	hs := h.alloc(s)
	if !s.Empty() {
		h.outs = append(h.outs, [2]tensor.Span{s, hs})
	}
	return hs
}

// done copies the outputs back to the device.
func (h *hostRowRun) done() {
	for _, o := range h.outs {
		buf := make([]byte, o[0].Numel()*o[0].DType.Size())
		h.cpu.ReadHost(o[1], buf)
		h.b.WriteHost(o[0], buf)
	}
}

// ResidualNorm runs the CPU kernel on host copies (see the file comment).
func (b *Backend) ResidualNorm(y, sum, mean, rstd, x, residual, w, bias tensor.Span, p tensor.NormParams) {
	h := b.hostRowRun()
	h.cpu.ResidualNorm(h.out(y), h.out(sum), h.out(mean), h.out(rstd), h.in(x), h.in(residual), h.in(w), h.in(bias), p)
	h.done()
}

// ResidualNormBackward runs the CPU kernel on host copies.
func (b *Backend) ResidualNormBackward(dx, dw, db, dy, dsum, s, w, mean, rstd tensor.Span, p tensor.NormParams) {
	h := b.hostRowRun()
	h.cpu.ResidualNormBackward(h.out(dx), h.out(dw), h.out(db), h.in(dy), h.in(dsum), h.in(s), h.in(w), h.in(mean), h.in(rstd), p)
	h.done()
}

// BiasActivation runs the CPU kernel on host copies.
func (b *Backend) BiasActivation(act tensor.UnaryOp, y, x, bias tensor.Span) {
	h := b.hostRowRun()
	h.cpu.BiasActivation(act, h.out(y), h.in(x), h.in(bias))
	h.done()
}

// BiasActivationBackward runs the CPU kernel on host copies.
func (b *Backend) BiasActivationBackward(act tensor.UnaryOp, dx, dbias, dy, x, bias tensor.Span) {
	h := b.hostRowRun()
	h.cpu.BiasActivationBackward(act, h.out(dx), h.out(dbias), h.in(dy), h.in(x), h.in(bias))
	h.done()
}

// SwiGLU runs the CPU kernel on host copies.
func (b *Backend) SwiGLU(y, gate, up, gateBias, upBias tensor.Span) {
	h := b.hostRowRun()
	h.cpu.SwiGLU(h.out(y), h.in(gate), h.in(up), h.in(gateBias), h.in(upBias))
	h.done()
}

// SwiGLUBackward runs the CPU kernel on host copies.
func (b *Backend) SwiGLUBackward(dgate, dup, dgateBias, dupBias, dy, gate, up, gateBias, upBias tensor.Span) {
	h := b.hostRowRun()
	h.cpu.SwiGLUBackward(h.out(dgate), h.out(dup), h.out(dgateBias), h.out(dupBias), h.in(dy), h.in(gate), h.in(up),
		h.in(gateBias), h.in(upBias))
	h.done()
}

// BiasDropoutResidual runs the CPU kernel on host copies.
func (b *Backend) BiasDropoutResidual(y, x, bias, residual tensor.Span, p tensor.DropoutParams) {
	h := b.hostRowRun()
	h.cpu.BiasDropoutResidual(h.out(y), h.in(x), h.in(bias), h.in(residual), p)
	h.done()
}

// BiasDropoutBackward runs the CPU kernel on host copies.
func (b *Backend) BiasDropoutBackward(dx, dbias, dy tensor.Span, p tensor.DropoutParams) {
	h := b.hostRowRun()
	h.cpu.BiasDropoutBackward(h.out(dx), h.out(dbias), h.in(dy), p)
	h.done()
}

// RotaryEmbedding runs the CPU kernel on host copies (y may be x).
func (b *Backend) RotaryEmbedding(y, x tensor.Span, p tensor.RoPEParams) {
	h := b.hostRowRun()
	h.cpu.RotaryEmbedding(h.out(y), h.in(x), p)
	h.done()
}
