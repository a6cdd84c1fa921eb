package cuda

import (
	"encoding/binary"

	"megago/cuda/internal/driver"
	"megago/tensor"
)

// The row-wise fused kernels of tensor.RowKernels (residual + norm, bias + activation,
// bias + SwiGLU, bias + dropout + residual, rotary embedding), each one kernel launch
// (plus a column sum for a bias gradient, norm.cu's two weight-gradient stages for dw and
// db), for every float dtype:
//
//   - ResidualNorm(+Backward): norm.cu's norm_fwd/norm_bwd with the residual add fused
//     (LayerNorm and RMSNorm, with and without residual; mean and rstd in the dtype the
//     seam passes, float or double compute as for LayerNorm).
//   - BiasActivation(+Backward): elementwise.cu's bias_act with any tensor.UnaryOp (the
//     seam passes OpGeLUTanh and OpGeLUErf).
//   - SwiGLU(+Backward), BiasDropoutResidual/BiasDropoutBackward, RotaryEmbedding:
//     fused.cu. The dropout mask is the CPU backend's bit for bit: element e of the full
//     tensor is dropped when the 53-bit fraction of Philox block e/2 (words 2(e mod 2),
//     2(e mod 2)+1) under p.Key is below p.P (prelude.cu's uniform_at).
//
// Numerics: compute is in float for F32, BF16 and F16 and in double for F64, each output
// rounded once; column sums (dw, db, dbias) are in float over chunks of 256 rows (double
// for F64), where the CPU sums in float64, so they agree with the CPU backend within
// float32 rounding, not bit for bit. No parameter combination falls back to the host.

// ResidualNorm sets sum = x + residual and y = norm(sum) in one kernel (norm.cu).
func (b *Backend) ResidualNorm(y, sum, mean, rstd, x, residual, w, bias tensor.Span, p tensor.NormParams) {
	release := b.dev.bind()
	defer release()
	if p.RMS {
		mean, bias = tensor.Span{}, tensor.Span{}
	}
	if residual.Empty() {
		sum = tensor.Span{}
	}
	b.normForward("ResidualNorm", y, mean, rstd, x, residual, sum, w, bias, p.Eps, p.RMS)
}

// ResidualNormBackward sets dx = norm'(dy) + dsum and the weight and bias gradients
// (norm.cu).
func (b *Backend) ResidualNormBackward(dx, dw, db, dy, dsum, s, w, mean, rstd tensor.Span, p tensor.NormParams) {
	release := b.dev.bind()
	defer release()
	if p.RMS { // norm_bwd drops mean(g) without a mean
		mean, db = tensor.Span{}, tensor.Span{}
	}
	b.normBackward("ResidualNormBackward", dx, dw, db, dy, s, w, dsum, mean, rstd)
}

// BiasActivation sets y = act(x + bias) (elementwise.cu's bias_act).
func (b *Backend) BiasActivation(act tensor.UnaryOp, y, x, bias tensor.Span) {
	release := b.dev.bind()
	defer release()
	const op = "BiasActivation"
	rows, c := lastDim(x)
	b.run("elementwise", "bias_act"+computeSuffix(x.DType), rows*c, driver.NewKernelArgs().Ptr(b.ptr(op, y)).
		Ptr(b.ptr(op, x)).Ptr(b.ptr(op, bias)).I32(dtArg(x.DType)).I64(rows*c).I64(c).I32(int32(act)))
}

// BiasActivationBackward sets dx = dy·act'(x + bias) and dbias to dx's column sums.
func (b *Backend) BiasActivationBackward(act tensor.UnaryOp, dx, dbias, dy, x, bias tensor.Span) {
	release := b.dev.bind()
	defer release()
	const op = "BiasActivationBackward"
	rows, c := lastDim(x)
	b.run("elementwise", "bias_act_bwd"+computeSuffix(x.DType), rows*c, driver.NewKernelArgs().Ptr(b.ptr(op, dx)).
		Ptr(b.ptr(op, dy)).Ptr(b.ptr(op, x)).Ptr(b.ptr(op, bias)).I32(dtArg(x.DType)).I64(rows*c).I64(c).I32(int32(act)))
	if !dbias.Empty() {
		b.colSums(dbias, dx, rows, c)
	}
}

// SwiGLU sets y = silu(gate + gateBias)·(up + upBias) (fused.cu's swiglu).
func (b *Backend) SwiGLU(y, gate, up, gateBias, upBias tensor.Span) {
	release := b.dev.bind()
	defer release()
	const op = "SwiGLU"
	rows, c := lastDim(gate)
	b.run("fused", "swiglu"+computeSuffix(gate.DType), rows*c, driver.NewKernelArgs().Ptr(b.ptr(op, y)).
		Ptr(b.ptr(op, gate)).Ptr(b.ptr(op, up)).Ptr(b.ptr(op, gateBias)).Ptr(b.ptr(op, upBias)).
		I32(dtArg(gate.DType)).I64(rows*c).I64(c))
}

// SwiGLUBackward sets dgate and dup (fused.cu's swiglu_bwd) and the bias gradients to
// their column sums.
func (b *Backend) SwiGLUBackward(dgate, dup, dgateBias, dupBias, dy, gate, up, gateBias, upBias tensor.Span) {
	release := b.dev.bind()
	defer release()
	const op = "SwiGLUBackward"
	rows, c := lastDim(gate)
	b.run("fused", "swiglu_bwd"+computeSuffix(gate.DType), rows*c, driver.NewKernelArgs().Ptr(b.ptr(op, dgate)).
		Ptr(b.ptr(op, dup)).Ptr(b.ptr(op, dy)).Ptr(b.ptr(op, gate)).Ptr(b.ptr(op, up)).Ptr(b.ptr(op, gateBias)).
		Ptr(b.ptr(op, upBias)).I32(dtArg(gate.DType)).I64(rows*c).I64(c))
	if !dgateBias.Empty() {
		b.colSums(dgateBias, dgate, rows, c)
	}
	if !dupBias.Empty() {
		b.colSums(dupBias, dup, rows, c)
	}
}

// BiasDropoutResidual sets y = residual + dropout(x + bias) (fused.cu's
// bias_dropout_add, the CPU backend's mask).
func (b *Backend) BiasDropoutResidual(y, x, bias, residual tensor.Span, p tensor.DropoutParams) {
	release := b.dev.bind()
	defer release()
	b.biasDropoutAdd(y, x, bias, residual, p.P, p.Key, dropoutRegion{Full: p.Full, Start: p.Start})
}

// BiasDropoutBackward sets dx = dy·mask (fused.cu's dropout_bwd) and dbias to dx's
// column sums; with p.P = 0 and an empty dx, dbias to dy's.
func (b *Backend) BiasDropoutBackward(dx, dbias, dy tensor.Span, p tensor.DropoutParams) {
	release := b.dev.bind()
	defer release()
	src := dy
	if !dx.Empty() {
		b.dropoutBackward(dx, dy, p.P, p.Key, dropoutRegion{Full: p.Full, Start: p.Start})
		src = dx
	}
	if !dbias.Empty() {
		rows, c := lastDim(dy)
		b.colSums(dbias, src, rows, c)
	}
}

// RotaryEmbedding sets y = RoPE(x) (fused.cu's rope); y may be x. The positions are
// uploaded as an I64 tensor [T] for the call.
func (b *Backend) RotaryEmbedding(y, x tensor.Span, p tensor.RoPEParams) {
	release := b.dev.bind()
	defer release()
	host := make([]byte, 8*len(p.Positions))
	for i, v := range p.Positions {
		binary.LittleEndian.PutUint64(host[8*i:], uint64(int64(v)))
	}
	buf := b.Alloc(tensor.I64, len(p.Positions))
	defer b.Free(buf) // stream-ordered: the allocator reuses it only after the kernel
	pos := tensor.Span{Buf: buf, DType: tensor.I64, Shape: tensor.Shape{len(p.Positions)}}
	b.WriteHost(pos, host)
	b.rope(y, x, pos, p.Theta, p.Inverse)
}
