package cuda

import (
	"fmt"

	"megago/cuda/internal/driver"
	"megago/tensor"
)

// Softmax, norms, embeddings and cross entropy (internal/kernels/softmax.cu, norm.cu,
// embed.cu).

// lastDim returns the rows and row length of a span seen as [rows, n] over its last dim.
func lastDim(s tensor.Span) (rows, n int64) {
	if len(s.Shape) == 0 {
		return 1, 1
	}
	n = int64(s.Shape[len(s.Shape)-1])
	if n == 0 {
		return 0, 0
	}
	return int64(s.Numel()) / n, n
}

// Softmax sets y = softmax(scale·x) over the last dim with the mask and causal limit.
func (b *Backend) Softmax(y, x, mask tensor.Span, p tensor.SoftmaxParams) {
	release := b.dev.bind()
	defer release()
	rows, n := lastDim(x)
	tq := int64(1)
	if len(x.Shape) >= 2 {
		tq = int64(x.Shape[len(x.Shape)-2])
	}
	var m idxDesc
	mstride, mdt := int64(0), int32(0)
	if !mask.Empty() {
		st := tensor.BroadcastStrides(mask.Shape, x.Shape)
		last := len(st) - 1
		m = newIdx(x.Shape[:last], st[:last])
		mstride, mdt = int64(st[last]), dtArg(mask.DType)
	}
	a := driver.NewKernelArgs().Ptr(b.ptr("Softmax", y)).Ptr(b.ptr("Softmax", x)).I32(dtArg(x.DType)).
		Ptr(b.ptr("Softmax", mask)).I32(mdt).Bytes(m.bytes()).I64(mstride).I64(rows).I64(n).I64(tq).
		F64(p.Scale).I32(boolArg(p.Causal)).I32(boolArg(p.Log))
	b.runRows("softmax", "softmax"+computeSuffix(y.DType), rows, n, a)
}

func boolArg(v bool) int32 {
	if v {
		return 1
	}
	return 0
}

// SoftmaxBackward sets dx from the output y and its gradient dy.
func (b *Backend) SoftmaxBackward(dx, y, dy tensor.Span, p tensor.SoftmaxParams) {
	release := b.dev.bind()
	defer release()
	rows, n := lastDim(y)
	a := driver.NewKernelArgs().Ptr(b.ptr("SoftmaxBackward", dx)).Ptr(b.ptr("SoftmaxBackward", y)).
		Ptr(b.ptr("SoftmaxBackward", dy)).I32(dtArg(y.DType)).I64(rows).I64(n).F64(p.Scale).I32(boolArg(p.Log))
	b.runRows("softmax", "softmax_bwd"+computeSuffix(dx.DType), rows, n, a)
}

// normForward launches norm_fwd; res and sum may be empty (no residual).
func (b *Backend) normForward(op string, y, mean, rstd, x, res, sum, w, bias tensor.Span, eps float64, rms bool) {
	rows, c := lastDim(x)
	a := driver.NewKernelArgs().Ptr(b.ptr(op, y)).Ptr(b.ptr(op, mean)).Ptr(b.ptr(op, rstd)).I32(dtArg(rstd.DType)).
		Ptr(b.ptr(op, x)).Ptr(b.ptr(op, res)).Ptr(b.ptr(op, sum)).Ptr(b.ptr(op, w)).Ptr(b.ptr(op, bias)).
		I32(dtArg(x.DType)).I64(rows).I64(c).F64(eps).I32(boolArg(rms))
	b.runRows("norm", "norm_fwd"+computeSuffix(x.DType), rows, c, a)
}

// normBackward launches norm_bwd and, for dw or db, the two weight-gradient stages.
func (b *Backend) normBackward(op string, dx, dw, db, dy, x, w, dextra, mean, rstd tensor.Span) {
	rows, c := lastDim(x)
	a := driver.NewKernelArgs().Ptr(b.ptr(op, dx)).Ptr(b.ptr(op, dy)).Ptr(b.ptr(op, x)).Ptr(b.ptr(op, w)).
		Ptr(b.ptr(op, dextra)).I32(dtArg(x.DType)).Ptr(b.ptr(op, mean)).Ptr(b.ptr(op, rstd)).I32(dtArg(rstd.DType)).
		I64(rows).I64(c)
	b.runRows("norm", "norm_bwd"+computeSuffix(dx.DType), rows, c, a)
	if dw.Empty() && db.Empty() {
		return
	}
	b.columnStats(op, dw, db, dy, x, mean, rstd, rows, c)
}

// wgradChunk is the number of rows one block of norm_wgrad_partial sums.
const wgradChunk = 256

// columnStats sets dw[j] = Σ_r dy·x̂ and db[j] = Σ_r dy in two deterministic stages.
func (b *Backend) columnStats(op string, dw, db, dy, x, mean, rstd tensor.Span, rows, c int64) {
	chunks := max(1, (rows+wgradChunk-1)/wgradChunk)
	pw, err := b.alloc.get(chunks * c * 8)
	b.must(err)
	defer b.alloc.put(pw)
	var pb driver.DevicePtr
	if !db.Empty() {
		pb, err = b.alloc.get(chunks * c * 8)
		b.must(err)
		defer b.alloc.put(pb)
	}
	grid := [3]uint32{uint32((c + blockSize - 1) / blockSize), uint32(chunks), 1}
	b.must(b.dev.launch("norm", "norm_wgrad_partial", grid, [3]uint32{blockSize, 1, 1}, 0, driver.NewKernelArgs().
		Ptr(pw).Ptr(pb).Ptr(b.ptr(op, dy)).Ptr(b.ptr(op, x)).I32(dtArg(x.DType)).Ptr(b.ptr(op, mean)).
		Ptr(b.ptr(op, rstd)).I32(dtArg(rstd.DType)).I64(rows).I64(c).I64(wgradChunk)))
	dt := dw.DType
	if dw.Empty() {
		dt = db.DType
	}
	b.run("norm", "norm_wgrad_finish", c, driver.NewKernelArgs().Ptr(b.ptr(op, dw)).Ptr(b.ptr(op, db)).I32(dtArg(dt)).
		Ptr(pw).Ptr(pb).I64(chunks).I64(c))
}

// LayerNorm normalizes rows of x and writes mean and rstd.
func (b *Backend) LayerNorm(y, mean, rstd, x, w, bias tensor.Span, eps float64) {
	release := b.dev.bind()
	defer release()
	b.normForward("LayerNorm", y, mean, rstd, x, tensor.Span{}, tensor.Span{}, w, bias, eps, false)
}

// LayerNormBackward writes dx and, when not empty, dw and db.
func (b *Backend) LayerNormBackward(dx, dw, db, dy, x, w, mean, rstd tensor.Span) {
	release := b.dev.bind()
	defer release()
	b.normBackward("LayerNormBackward", dx, dw, db, dy, x, w, tensor.Span{}, mean, rstd)
}

// RMSNorm sets y = x·rstd·w.
func (b *Backend) RMSNorm(y, rstd, x, w tensor.Span, eps float64) {
	release := b.dev.bind()
	defer release()
	b.normForward("RMSNorm", y, tensor.Span{}, rstd, x, tensor.Span{}, tensor.Span{}, w, tensor.Span{}, eps, true)
}

// RMSNormBackward writes dx and, when not empty, dw.
func (b *Backend) RMSNormBackward(dx, dw, dy, x, w, rstd tensor.Span) {
	release := b.dev.bind()
	defer release()
	b.normBackward("RMSNormBackward", dx, dw, tensor.Span{}, dy, x, w, tensor.Span{}, tensor.Span{}, rstd)
}

// Embedding sets dst[i] = w[ids[i]].
func (b *Backend) Embedding(dst, w, ids tensor.Span) {
	release := b.dev.bind()
	defer release()
	v, c := int64(w.Shape[0]), int64(w.Shape[1])
	nids := int64(ids.Numel())
	a := driver.NewKernelArgs().Ptr(b.ptr("Embedding", dst)).Ptr(b.ptr("Embedding", w)).Ptr(b.ptr("Embedding", ids)).
		I32(dtArg(ids.DType)).I64(nids).I64(c).I64(v)
	b.run("embed", fmt.Sprintf("embedding_%d", w.DType.Size()), nids*c, b.flagArgs(a, opEmbedding))
}

// EmbeddingBackward adds dy[i] into dw[ids[i]].
func (b *Backend) EmbeddingBackward(dw, dy, ids tensor.Span) {
	release := b.dev.bind()
	defer release()
	v, c := int64(dw.Shape[0]), int64(dw.Shape[1])
	nids := int64(ids.Numel())
	a := driver.NewKernelArgs().Ptr(b.ptr("EmbeddingBackward", dw)).Ptr(b.ptr("EmbeddingBackward", dy)).I32(dtArg(dw.DType)).
		Ptr(b.ptr("EmbeddingBackward", ids)).I32(dtArg(ids.DType)).I64(nids).I64(c).I64(v)
	b.run("embed", "embedding_bwd", nids*c, b.flagArgs(a, opEmbeddingBackward))
}

// CrossEntropy writes each row's loss and log-sum-exp.
func (b *Backend) CrossEntropy(loss, lse, logits, targets tensor.Span, p tensor.CrossEntropyParams) {
	release := b.dev.bind()
	defer release()
	n, v := int64(logits.Shape[0]), int64(logits.Shape[1])
	a := driver.NewKernelArgs().Ptr(b.ptr("CrossEntropy", loss)).I32(dtArg(loss.DType)).Ptr(b.ptr("CrossEntropy", lse)).
		I32(dtArg(lse.DType)).Ptr(b.ptr("CrossEntropy", logits)).I32(dtArg(logits.DType)).
		Ptr(b.ptr("CrossEntropy", targets)).I32(dtArg(targets.DType)).I64(n).I64(v).I32(boolArg(p.Ignore)).
		I64(p.IgnoreIndex).F64(p.LabelSmoothing)
	b.runRows("embed", "ce_fwd"+computeSuffix(logits.DType), n, v, b.flagArgs(a, opCrossEntropy))
}

// CrossEntropyBackward sets dlogits from the per-row loss gradient.
func (b *Backend) CrossEntropyBackward(dlogits, logits, targets, lse, dloss tensor.Span, p tensor.CrossEntropyParams) {
	release := b.dev.bind()
	defer release()
	const op = "CrossEntropyBackward"
	n, v := int64(logits.Shape[0]), int64(logits.Shape[1])
	a := driver.NewKernelArgs().Ptr(b.ptr(op, dlogits)).Ptr(b.ptr(op, logits)).I32(dtArg(logits.DType)).
		Ptr(b.ptr(op, targets)).I32(dtArg(targets.DType)).Ptr(b.ptr(op, lse)).I32(dtArg(lse.DType)).
		Ptr(b.ptr(op, dloss)).I32(dtArg(dloss.DType)).I64(n).I64(v).I32(boolArg(p.Ignore)).I64(p.IgnoreIndex).
		F64(p.LabelSmoothing)
	b.run("embed", "ce_bwd"+computeSuffix(logits.DType), n*v, a)
}

// vocabCEShape returns the rows N, width W and class columns of logits [..., W].
func vocabCEShape(logits tensor.Span, p tensor.VocabCrossEntropyParams) (n, w, local int64) {
	w = int64(logits.Shape[len(logits.Shape)-1])
	n = int64(logits.Numel()) / max(w, 1)
	return n, w, max(0, min(w, int64(p.Vocab-p.Start)))
}

// VocabCrossEntropyStats writes this rank's per-row statistics (F64 [4, N]).
func (b *Backend) VocabCrossEntropyStats(stats, logits, targets tensor.Span, p tensor.VocabCrossEntropyParams) {
	release := b.dev.bind()
	defer release()
	const op = "VocabCrossEntropyStats"
	n, w, local := vocabCEShape(logits, p)
	a := driver.NewKernelArgs().Ptr(b.ptr(op, stats)).Ptr(b.ptr(op, logits)).I32(dtArg(logits.DType)).Ptr(b.ptr(op, targets)).
		I32(dtArg(targets.DType)).I64(n).I64(w).I64(local).I64(int64(p.Start)).I64(int64(p.Vocab)).
		I32(boolArg(p.Ignore)).I64(p.IgnoreIndex)
	b.runRows("embed", "vce_stats", n, max(local, 1), b.flagArgs(a, opVocabParallelCE))
}

// VocabCrossEntropyLoss sets loss from the combined statistics.
func (b *Backend) VocabCrossEntropyLoss(loss, stats, targets tensor.Span, p tensor.VocabCrossEntropyParams) {
	release := b.dev.bind()
	defer release()
	const op = "VocabCrossEntropyLoss"
	n := int64(targets.Numel())
	b.run("embed", "vce_loss", n, driver.NewKernelArgs().Ptr(b.ptr(op, loss)).I32(dtArg(loss.DType)).Ptr(b.ptr(op, stats)).
		Ptr(b.ptr(op, targets)).I32(dtArg(targets.DType)).I64(n).I64(int64(p.Vocab)).I32(boolArg(p.Ignore)).
		I64(p.IgnoreIndex).F64(p.LabelSmoothing))
}

// VocabCrossEntropyBackward sets dlogits from the combined statistics and dloss.
func (b *Backend) VocabCrossEntropyBackward(dlogits, logits, targets, stats, dloss tensor.Span, p tensor.VocabCrossEntropyParams) {
	release := b.dev.bind()
	defer release()
	const op = "VocabCrossEntropyBackward"
	n, w, local := vocabCEShape(logits, p)
	b.run("embed", "vce_bwd", n*w, driver.NewKernelArgs().Ptr(b.ptr(op, dlogits)).Ptr(b.ptr(op, logits)).
		I32(dtArg(logits.DType)).Ptr(b.ptr(op, targets)).I32(dtArg(targets.DType)).Ptr(b.ptr(op, stats)).
		Ptr(b.ptr(op, dloss)).I32(dtArg(dloss.DType)).I64(n).I64(w).I64(local).I64(int64(p.Start)).I64(int64(p.Vocab)).
		I32(boolArg(p.Ignore)).I64(p.IgnoreIndex).F64(p.LabelSmoothing))
}
