package fakedev

import "megago/tensor"

// The row-wise fused kernels (tensor.RowKernels), like the others: each span translated
// from handle to CPU storage, then the CPU kernel.

// ResidualNorm runs the CPU kernel on the storage behind the handles.
func (b *Backend) ResidualNorm(y, sum, mean, rstd, x, residual, w, bias tensor.Span, p tensor.NormParams) {
	const n = "ResidualNorm"
	b.cpu.ResidualNorm(b.span(n, y), b.span(n, sum), b.span(n, mean), b.span(n, rstd), b.span(n, x),
		b.span(n, residual), b.span(n, w), b.span(n, bias), p)
}

// ResidualNormBackward runs the CPU kernel on the storage behind the handles.
func (b *Backend) ResidualNormBackward(dx, dw, db, dy, dsum, s, w, mean, rstd tensor.Span, p tensor.NormParams) {
	const n = "ResidualNormBackward"
	b.cpu.ResidualNormBackward(b.span(n, dx), b.span(n, dw), b.span(n, db), b.span(n, dy), b.span(n, dsum),
		b.span(n, s), b.span(n, w), b.span(n, mean), b.span(n, rstd), p)
}

// BiasActivation runs the CPU kernel on the storage behind the handles.
func (b *Backend) BiasActivation(act tensor.UnaryOp, y, x, bias tensor.Span) {
	const n = "BiasActivation"
	b.cpu.BiasActivation(act, b.span(n, y), b.span(n, x), b.span(n, bias))
}

// BiasActivationBackward runs the CPU kernel on the storage behind the handles.
func (b *Backend) BiasActivationBackward(act tensor.UnaryOp, dx, dbias, dy, x, bias tensor.Span) {
	const n = "BiasActivationBackward"
	b.cpu.BiasActivationBackward(act, b.span(n, dx), b.span(n, dbias), b.span(n, dy), b.span(n, x), b.span(n, bias))
}

// SwiGLU runs the CPU kernel on the storage behind the handles.
func (b *Backend) SwiGLU(y, gate, up, gateBias, upBias tensor.Span) {
	const n = "SwiGLU"
	b.cpu.SwiGLU(b.span(n, y), b.span(n, gate), b.span(n, up), b.span(n, gateBias), b.span(n, upBias))
}

// SwiGLUBackward runs the CPU kernel on the storage behind the handles.
func (b *Backend) SwiGLUBackward(dgate, dup, dgateBias, dupBias, dy, gate, up, gateBias, upBias tensor.Span) {
	const n = "SwiGLUBackward"
	b.cpu.SwiGLUBackward(b.span(n, dgate), b.span(n, dup), b.span(n, dgateBias), b.span(n, dupBias), b.span(n, dy),
		b.span(n, gate), b.span(n, up), b.span(n, gateBias), b.span(n, upBias))
}

// BiasDropoutResidual runs the CPU kernel on the storage behind the handles.
func (b *Backend) BiasDropoutResidual(y, x, bias, residual tensor.Span, p tensor.DropoutParams) {
	const n = "BiasDropoutResidual"
	b.cpu.BiasDropoutResidual(b.span(n, y), b.span(n, x), b.span(n, bias), b.span(n, residual), p)
}

// BiasDropoutBackward runs the CPU kernel on the storage behind the handles.
func (b *Backend) BiasDropoutBackward(dx, dbias, dy tensor.Span, p tensor.DropoutParams) {
	const n = "BiasDropoutBackward"
	b.cpu.BiasDropoutBackward(b.span(n, dx), b.span(n, dbias), b.span(n, dy), p)
}

// RotaryEmbedding runs the CPU kernel on the storage behind the handles.
func (b *Backend) RotaryEmbedding(y, x tensor.Span, p tensor.RoPEParams) {
	b.cpu.RotaryEmbedding(b.span("RotaryEmbedding", y), b.span("RotaryEmbedding", x), p)
}
