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

// ResidualNorm runs the CPU kernel on host copies (see the file comment).
func (b *Backend) ResidualNorm(y, sum, mean, rstd, x, residual, w, bias tensor.Span, p tensor.NormParams) {
	h := b.hostRun()
	h.cpu.ResidualNorm(h.out(y), h.out(sum), h.out(mean), h.out(rstd), h.in(x), h.in(residual), h.in(w), h.in(bias), p)
	h.done()
}

// ResidualNormBackward runs the CPU kernel on host copies.
func (b *Backend) ResidualNormBackward(dx, dw, db, dy, dsum, s, w, mean, rstd tensor.Span, p tensor.NormParams) {
	h := b.hostRun()
	h.cpu.ResidualNormBackward(h.out(dx), h.out(dw), h.out(db), h.in(dy), h.in(dsum), h.in(s), h.in(w), h.in(mean), h.in(rstd), p)
	h.done()
}

// BiasActivation runs the CPU kernel on host copies.
func (b *Backend) BiasActivation(act tensor.UnaryOp, y, x, bias tensor.Span) {
	h := b.hostRun()
	h.cpu.BiasActivation(act, h.out(y), h.in(x), h.in(bias))
	h.done()
}

// BiasActivationBackward runs the CPU kernel on host copies.
func (b *Backend) BiasActivationBackward(act tensor.UnaryOp, dx, dbias, dy, x, bias tensor.Span) {
	h := b.hostRun()
	h.cpu.BiasActivationBackward(act, h.out(dx), h.out(dbias), h.in(dy), h.in(x), h.in(bias))
	h.done()
}

// SwiGLU runs the CPU kernel on host copies.
func (b *Backend) SwiGLU(y, gate, up, gateBias, upBias tensor.Span) {
	h := b.hostRun()
	h.cpu.SwiGLU(h.out(y), h.in(gate), h.in(up), h.in(gateBias), h.in(upBias))
	h.done()
}

// SwiGLUBackward runs the CPU kernel on host copies.
func (b *Backend) SwiGLUBackward(dgate, dup, dgateBias, dupBias, dy, gate, up, gateBias, upBias tensor.Span) {
	h := b.hostRun()
	h.cpu.SwiGLUBackward(h.out(dgate), h.out(dup), h.out(dgateBias), h.out(dupBias), h.in(dy), h.in(gate), h.in(up),
		h.in(gateBias), h.in(upBias))
	h.done()
}

// BiasDropoutResidual runs the CPU kernel on host copies.
func (b *Backend) BiasDropoutResidual(y, x, bias, residual tensor.Span, p tensor.DropoutParams) {
	h := b.hostRun()
	h.cpu.BiasDropoutResidual(h.out(y), h.in(x), h.in(bias), h.in(residual), p)
	h.done()
}

// BiasDropoutBackward runs the CPU kernel on host copies.
func (b *Backend) BiasDropoutBackward(dx, dbias, dy tensor.Span, p tensor.DropoutParams) {
	h := b.hostRun()
	h.cpu.BiasDropoutBackward(h.out(dx), h.out(dbias), h.in(dy), p)
	h.done()
}

// RotaryEmbedding runs the CPU kernel on host copies (y may be x).
func (b *Backend) RotaryEmbedding(y, x tensor.Span, p tensor.RoPEParams) {
	h := b.hostRun()
	h.cpu.RotaryEmbedding(h.out(y), h.in(x), p)
	h.done()
}
