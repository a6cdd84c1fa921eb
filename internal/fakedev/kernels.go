package fakedev

import "megago/tensor"

// The kernels translate each span from handle to CPU storage and run the CPU kernel.

// Copy2D runs the CPU kernel on the storage behind the handles.
func (b *Backend) Copy2D(dst tensor.Span, dstStride int, src tensor.Span, srcStride int, rows, cols int) {
	b.cpu.Copy2D(b.strided("Copy2D", dst, dstStride, rows, cols), dstStride,
		b.strided("Copy2D", src, srcStride, rows, cols), srcStride, rows, cols)
}

// Fill runs the CPU kernel on the storage behind the handles.
func (b *Backend) Fill(dst tensor.Span, v float64) { b.cpu.Fill(b.span("Fill", dst), v) }

// Arange runs the CPU kernel on the storage behind the handles.
func (b *Backend) Arange(dst tensor.Span, start, step float64) {
	b.cpu.Arange(b.span("Arange", dst), start, step)
}

// Cast runs the CPU kernel on the storage behind the handles.
func (b *Backend) Cast(dst, src tensor.Span) {
	b.cpu.Cast(b.span("Cast", dst), b.span("Cast", src))
}

// Permute runs the CPU kernel on the storage behind the handles.
func (b *Backend) Permute(dst, src tensor.Span, perm []int) {
	b.cpu.Permute(b.span("Permute", dst), b.span("Permute", src), perm)
}

// Random runs the CPU kernel on the storage behind the handles.
func (b *Backend) Random(dst tensor.Span, p tensor.RandomParams) {
	b.cpu.Random(b.span("Random", dst), p)
}

// Unary runs the CPU kernel on the storage behind the handles.
func (b *Backend) Unary(op tensor.UnaryOp, dst, x tensor.Span, p float64) {
	b.cpu.Unary(op, b.span("Unary", dst), b.span("Unary", x), p)
}

// UnaryBackward runs the CPU kernel on the storage behind the handles.
func (b *Backend) UnaryBackward(op tensor.UnaryOp, dx, x, y, dy tensor.Span, p float64) {
	const n = "UnaryBackward"
	b.cpu.UnaryBackward(op, b.span(n, dx), b.span(n, x), b.span(n, y), b.span(n, dy), p)
}

// Binary runs the CPU kernel on the storage behind the handles.
func (b *Backend) Binary(op tensor.BinaryOp, dst, x, y tensor.Span) {
	b.cpu.Binary(op, b.span("Binary", dst), b.span("Binary", x), b.span("Binary", y))
}

// Where runs the CPU kernel on the storage behind the handles.
func (b *Backend) Where(dst, cond, x, y tensor.Span) {
	b.cpu.Where(b.span("Where", dst), b.span("Where", cond), b.span("Where", x), b.span("Where", y))
}

// Reduce runs the CPU kernel on the storage behind the handles.
func (b *Backend) Reduce(op tensor.ReduceOp, dst, src tensor.Span, dim int) {
	b.cpu.Reduce(op, b.span("Reduce", dst), b.span("Reduce", src), dim)
}

// Max runs the CPU kernel on the storage behind the handles.
func (b *Backend) Max(dst, idx, src tensor.Span, dim int) {
	b.cpu.Max(b.span("Max", dst), b.span("Max", idx), b.span("Max", src), dim)
}

// Gather runs the CPU kernel on the storage behind the handles.
func (b *Backend) Gather(dst, src, idx tensor.Span, dim int) {
	b.cpu.Gather(b.span("Gather", dst), b.span("Gather", src), b.span("Gather", idx), dim)
}

// ScatterAdd runs the CPU kernel on the storage behind the handles.
func (b *Backend) ScatterAdd(dst, src, idx tensor.Span, dim int) {
	const n = "ScatterAdd"
	b.cpu.ScatterAdd(b.span(n, dst), b.span(n, src), b.span(n, idx), dim)
}

// MatMul runs the CPU kernel on the storage behind the handles.
func (b *Backend) MatMul(dst, x, y tensor.Span, p tensor.MatMulParams) {
	b.cpu.MatMul(b.span("MatMul", dst), b.span("MatMul", x), b.span("MatMul", y), p)
}

// Softmax runs the CPU kernel on the storage behind the handles.
func (b *Backend) Softmax(y, x, mask tensor.Span, p tensor.SoftmaxParams) {
	b.cpu.Softmax(b.span("Softmax", y), b.span("Softmax", x), b.span("Softmax", mask), p)
}

// SoftmaxBackward runs the CPU kernel on the storage behind the handles.
func (b *Backend) SoftmaxBackward(dx, y, dy tensor.Span, p tensor.SoftmaxParams) {
	const n = "SoftmaxBackward"
	b.cpu.SoftmaxBackward(b.span(n, dx), b.span(n, y), b.span(n, dy), p)
}

// LayerNorm runs the CPU kernel on the storage behind the handles.
func (b *Backend) LayerNorm(y, mean, rstd, x, w, bias tensor.Span, eps float64) {
	const n = "LayerNorm"
	b.cpu.LayerNorm(b.span(n, y), b.span(n, mean), b.span(n, rstd), b.span(n, x), b.span(n, w), b.span(n, bias), eps)
}

// LayerNormBackward runs the CPU kernel on the storage behind the handles.
func (b *Backend) LayerNormBackward(dx, dw, db, dy, x, w, mean, rstd tensor.Span) {
	const n = "LayerNormBackward"
	b.cpu.LayerNormBackward(b.span(n, dx), b.span(n, dw), b.span(n, db), b.span(n, dy),
		b.span(n, x), b.span(n, w), b.span(n, mean), b.span(n, rstd))
}

// RMSNorm runs the CPU kernel on the storage behind the handles.
func (b *Backend) RMSNorm(y, rstd, x, w tensor.Span, eps float64) {
	const n = "RMSNorm"
	b.cpu.RMSNorm(b.span(n, y), b.span(n, rstd), b.span(n, x), b.span(n, w), eps)
}

// RMSNormBackward runs the CPU kernel on the storage behind the handles.
func (b *Backend) RMSNormBackward(dx, dw, dy, x, w, rstd tensor.Span) {
	const n = "RMSNormBackward"
	b.cpu.RMSNormBackward(b.span(n, dx), b.span(n, dw), b.span(n, dy), b.span(n, x), b.span(n, w), b.span(n, rstd))
}

// Embedding runs the CPU kernel on the storage behind the handles.
func (b *Backend) Embedding(dst, w, ids tensor.Span) {
	b.cpu.Embedding(b.span("Embedding", dst), b.span("Embedding", w), b.span("Embedding", ids))
}

// EmbeddingBackward runs the CPU kernel on the storage behind the handles.
func (b *Backend) EmbeddingBackward(dw, dy, ids tensor.Span) {
	const n = "EmbeddingBackward"
	b.cpu.EmbeddingBackward(b.span(n, dw), b.span(n, dy), b.span(n, ids))
}

// CrossEntropy runs the CPU kernel on the storage behind the handles.
func (b *Backend) CrossEntropy(loss, lse, logits, targets tensor.Span, p tensor.CrossEntropyParams) {
	const n = "CrossEntropy"
	b.cpu.CrossEntropy(b.span(n, loss), b.span(n, lse), b.span(n, logits), b.span(n, targets), p)
}

// CrossEntropyBackward runs the CPU kernel on the storage behind the handles.
func (b *Backend) CrossEntropyBackward(dlogits, logits, targets, lse, dloss tensor.Span, p tensor.CrossEntropyParams) {
	const n = "CrossEntropyBackward"
	b.cpu.CrossEntropyBackward(b.span(n, dlogits), b.span(n, logits), b.span(n, targets), b.span(n, lse), b.span(n, dloss), p)
}

// VocabCrossEntropyStats runs the CPU kernel on the storage behind the handles.
func (b *Backend) VocabCrossEntropyStats(stats, logits, targets tensor.Span, p tensor.VocabCrossEntropyParams) {
	const n = "VocabCrossEntropyStats"
	b.cpu.VocabCrossEntropyStats(b.span(n, stats), b.span(n, logits), b.span(n, targets), p)
}

// VocabCrossEntropyLoss runs the CPU kernel on the storage behind the handles.
func (b *Backend) VocabCrossEntropyLoss(loss, stats, targets tensor.Span, p tensor.VocabCrossEntropyParams) {
	const n = "VocabCrossEntropyLoss"
	b.cpu.VocabCrossEntropyLoss(b.span(n, loss), b.span(n, stats), b.span(n, targets), p)
}

// VocabCrossEntropyBackward runs the CPU kernel on the storage behind the handles.
func (b *Backend) VocabCrossEntropyBackward(dlogits, logits, targets, stats, dloss tensor.Span, p tensor.VocabCrossEntropyParams) {
	const n = "VocabCrossEntropyBackward"
	b.cpu.VocabCrossEntropyBackward(b.span(n, dlogits), b.span(n, logits), b.span(n, targets), b.span(n, stats), b.span(n, dloss), p)
}

// AdamStep runs the CPU kernel on the storage behind the handles.
func (b *Backend) AdamStep(p tensor.AdamParams, segs []tensor.OptimSegment, param, grad, m, v, model tensor.Span) {
	const n = "AdamStep"
	b.cpu.AdamStep(p, segs, b.span(n, param), b.span(n, grad), b.span(n, m), b.span(n, v), b.span(n, model))
}

// SGDStep runs the CPU kernel on the storage behind the handles.
func (b *Backend) SGDStep(p tensor.SGDParams, segs []tensor.OptimSegment, param, grad, buf, model tensor.Span) {
	const n = "SGDStep"
	b.cpu.SGDStep(p, segs, b.span(n, param), b.span(n, grad), b.span(n, buf), b.span(n, model))
}

// SumSquares runs the CPU kernel on the storage behind the handles.
func (b *Backend) SumSquares(dst, x tensor.Span, ranges [][2]int) {
	b.cpu.SumSquares(b.span("SumSquares", dst), b.span("SumSquares", x), ranges)
}

// AccumulateGrad runs the CPU kernel on the storage behind the handles.
func (b *Backend) AccumulateGrad(main, grad tensor.Span) {
	b.cpu.AccumulateGrad(b.span("AccumulateGrad", main), b.span("AccumulateGrad", grad))
}

var (
	_ tensor.Backend  = (*Backend)(nil)
	_ tensor.Poisoner = (*Backend)(nil)
)
