package cuda

import (
	"fmt"

	"megago/cuda/internal/driver"
	"megago/tensor"
)

// The launches of the row-wise fused kernels (internal/kernels/fused.cu, and bias_act of
// elementwise.cu) behind tensor.RowKernels (backend_fused_rows.go). They take contiguous
// spans like the Backend methods; the caller binds the device. Shape letters: B batch,
// T sequence, C channels, NH heads, HS head size; "rows" is B·T.

// colSums sets dst [C] to the column sums of a [rows, C]: in double for an F64 a (one
// thread per column), else in columnSum's two float stages.
func (b *Backend) colSums(dst, a tensor.Span, rows, c int64) {
	if a.DType.Compute() != tensor.F64 {
		b.columnSum(dst, a, rows, c)
		return
	}
	b.run("reduce", "reduce_cols_d", c, driver.NewKernelArgs().Ptr(b.ptr("column sum", dst)).I32(dtArg(dst.DType)).
		Ptr(b.ptr("column sum", a)).I32(dtArg(a.DType)).I64(1).I64(rows).I64(c).I32(0))
}

// columnSum sets dst[j] = Σ_r a[r, j] in two deterministic stages.
func (b *Backend) columnSum(dst, a tensor.Span, rows, c int64) {
	chunks := max(1, (rows+wgradChunk-1)/wgradChunk)
	part, err := b.alloc.get(chunks * c * 4)
	b.must(err)
	defer b.alloc.put(part)
	grid := [3]uint32{uint32((c + blockSize - 1) / blockSize), uint32(chunks), 1}
	b.must(b.dev.launch("reduce", "colsum_partial", grid, [3]uint32{blockSize, 1, 1}, 0, driver.NewKernelArgs().
		Ptr(part).Ptr(b.ptr("column sum", a)).I32(dtArg(a.DType)).I64(rows).I64(c).I64(wgradChunk)))
	b.run("reduce", "colsum_finish", c, driver.NewKernelArgs().Ptr(b.ptr("column sum", dst)).I32(dtArg(dst.DType)).
		Ptr(part).I64(chunks).I64(c).I32(0))
}

// dropoutRegion places a tensor in the full (unsharded) tensor whose element indices key
// the dropout mask: Full is the whole shape and Start the first index of this part, as in
// tensor.Region. The zero value means the span is the whole tensor.
type dropoutRegion struct {
	Full  tensor.Shape
	Start []int
}

// maskIdx returns the walk of s's elements through the full tensor and the base index.
func (r dropoutRegion) maskIdx(s tensor.Span) (idxDesc, int64) {
	full, start := r.Full, r.Start
	if full == nil {
		full, start = s.Shape, make([]int, len(s.Shape))
	}
	if len(full) < len(s.Shape) || len(start) != len(full) {
		panic(fmt.Sprintf("cuda: dropout region %v at %v for a span %v", full, start, s.Shape))
	}
	st := contiguousStrides(full)
	base := 0
	for d, v := range start {
		base += v * st[d]
	}
	return newIdx(s.Shape, st[len(st)-len(s.Shape):]), int64(base)
}

// biasDropoutAdd sets y = residual + dropout(x + bias) with the dropout mask of
// tensor.DistDropout for rng key and region r (CPU twin: Add(residual,
// DropoutRegion(Add(x, bias), p, rng, full, start))). bias and residual may be empty;
// x, y, residual are [rows, C], bias [C].
func (b *Backend) biasDropoutAdd(y, x, bias, residual tensor.Span, p float64, key [2]uint32, r dropoutRegion) {
	const op = "BiasDropoutResidual"
	rows, c := lastDim(x)
	x0, base := r.maskIdx(x)
	b.run("fused", "bias_dropout_add"+computeSuffix(x.DType), rows*c, driver.NewKernelArgs().Ptr(b.ptr(op, y)).
		Ptr(b.ptr(op, x)).Ptr(b.ptr(op, bias)).Ptr(b.ptr(op, residual)).
		I32(dtArg(x.DType)).I64(rows*c).I64(c).Bytes(x0.bytes()).I64(base).U32(key[0]).U32(key[1]).F64(p))
}

// dropoutBackward sets dx = dy·mask/(1−p) with the mask biasDropoutAdd drew for the same
// key and region (dx = dy for p = 0).
func (b *Backend) dropoutBackward(dx, dy tensor.Span, p float64, key [2]uint32, r dropoutRegion) {
	const op = "BiasDropoutBackward"
	n := int64(dy.Numel())
	x0, base := r.maskIdx(dy)
	b.run("fused", "dropout_bwd"+computeSuffix(dy.DType), n, driver.NewKernelArgs().Ptr(b.ptr(op, dx)).Ptr(b.ptr(op, dy)).
		I32(dtArg(dy.DType)).I64(n).Bytes(x0.bytes()).I64(base).U32(key[0]).U32(key[1]).F64(p))
}

// rope rotates x [..., T, HS] by the positions [T] (I32 or I64) as Hugging Face Llama's
// rotate_half does with frequency θ^(−2i/HS); inverse rotates back, which is the
// backward. y may be x.
func (b *Backend) rope(y, x, positions tensor.Span, theta float64, inverse bool) {
	r := len(x.Shape)
	if r < 2 || x.Shape[r-1]%2 != 0 || positions.Numel() != x.Shape[r-2] {
		panic(fmt.Sprintf("cuda: RoPE: x %v with %d positions", x.Shape, positions.Numel()))
	}
	hs, t := int64(x.Shape[r-1]), int64(x.Shape[r-2])
	bnh := int64(x.Numel()) / (hs * t)
	sign := 1.0
	if inverse {
		sign = -1
	}
	b.run("fused", "rope"+computeSuffix(x.DType), bnh*t*hs/2, driver.NewKernelArgs().Ptr(b.ptr("RoPE", y)).
		Ptr(b.ptr("RoPE", x)).I32(dtArg(x.DType)).Ptr(b.ptr("RoPE", positions)).I32(dtArg(positions.DType)).
		I64(bnh).I64(t).I64(hs).F64(theta).F64(sign))
}

// encoder sets out [B, T, C] = wte[ids] + wpe[pos0 + t] (GPT-2's token and position
// embeddings in one pass; CPU twin: Add(Embedding(wte, ids), Embedding(wpe, positions))).
// ids is [B, T] (I32 or I64).
func (b *Backend) encoder(out, wte, wpe, ids tensor.Span, pos0 int) {
	release := b.dev.bind()
	defer release()
	t, c, v := int64(ids.Shape[len(ids.Shape)-1]), int64(wte.Shape[1]), int64(wte.Shape[0])
	if pos0 < 0 || int64(pos0)+t > int64(wpe.Shape[0]) {
		panic(fmt.Sprintf("cuda: Encoder: positions [%d, %d) beyond %d", pos0, int64(pos0)+t, wpe.Shape[0]))
	}
	n := int64(ids.Numel())
	a := driver.NewKernelArgs().Ptr(b.ptr("Encoder", out)).Ptr(b.ptr("Encoder", wte)).Ptr(b.ptr("Encoder", wpe)).I32(dtArg(wte.DType)).
		Ptr(b.ptr("Encoder", ids)).I32(dtArg(ids.DType)).I64(t).I64(c).I64(v).I64(int64(pos0)).I64(n)
	b.run("embed", "encoder", n*c, b.flagArgs(a, opEncoder))
}

// encoderBackward adds dout's rows into dwte[ids] and dwpe[pos0 + t].
func (b *Backend) encoderBackward(dwte, dwpe, dout, ids tensor.Span, pos0 int) {
	release := b.dev.bind()
	defer release()
	t, c, v := int64(ids.Shape[len(ids.Shape)-1]), int64(dwte.Shape[1]), int64(dwte.Shape[0])
	n := int64(ids.Numel())
	b.run("embed", "encoder_bwd", n*c, driver.NewKernelArgs().Ptr(b.ptr("EncoderBackward", dwte)).Ptr(b.ptr("EncoderBackward", dwpe)).
		Ptr(b.ptr("EncoderBackward", dout)).I32(dtArg(dout.DType)).Ptr(b.ptr("EncoderBackward", ids)).I32(dtArg(ids.DType)).
		I64(t).I64(c).I64(v).I64(int64(pos0)).I64(n))
}
