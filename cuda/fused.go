package cuda

import (
	"fmt"

	"megago/cuda/internal/driver"
	"megago/tensor"
)

// Fused kernels beyond tensor.Backend's ops. They are unexported: users reach fused
// kernels through tensor's fused operations, not through this package. Each takes
// contiguous spans like the Backend methods and states its CPU twin: the composition of
// tensor ops it equals (within rounding), which the GPU tests compare against. Shape
// letters: B batch, T sequence, C channels, NH heads, HS head size; "rows" is B·T.

// biasGeLU sets y = gelu(x + bias) (tanh approximation; CPU twin: GeLU(Add(x, bias))) for
// x, y [rows, C] and bias [C] (may be empty). y may be x.
func (b *Backend) biasGeLU(y, x, bias tensor.Span) {
	release := b.dev.bind()
	defer release()
	rows, c := lastDim(x)
	b.run("fused", "bias_gelu", rows*c, driver.NewKernelArgs().Ptr(b.ptr("BiasGeLU", y)).Ptr(b.ptr("BiasGeLU", x)).
		Ptr(b.ptr("BiasGeLU", bias)).I32(dtArg(x.DType)).I64(rows).I64(c))
}

// biasGeLUBackward sets dx = dy·gelu'(x + bias) and, when dbias is not empty, dbias to the
// column sums of dx (the bias gradient).
func (b *Backend) biasGeLUBackward(dx, dbias, dy, x, bias tensor.Span) {
	release := b.dev.bind()
	defer release()
	rows, c := lastDim(x)
	b.run("fused", "bias_gelu_bwd", rows*c, driver.NewKernelArgs().Ptr(b.ptr("BiasGeLUBackward", dx)).
		Ptr(b.ptr("BiasGeLUBackward", dy)).Ptr(b.ptr("BiasGeLUBackward", x)).Ptr(b.ptr("BiasGeLUBackward", bias)).
		I32(dtArg(x.DType)).I64(rows).I64(c))
	if !dbias.Empty() {
		b.columnSum(dbias, dx, rows, c)
	}
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
	release := b.dev.bind()
	defer release()
	rows, c := lastDim(x)
	x0, base := r.maskIdx(x)
	b.run("fused", "bias_dropout_add", rows*c, driver.NewKernelArgs().Ptr(b.ptr("BiasDropoutAdd", y)).
		Ptr(b.ptr("BiasDropoutAdd", x)).Ptr(b.ptr("BiasDropoutAdd", bias)).Ptr(b.ptr("BiasDropoutAdd", residual)).
		I32(dtArg(x.DType)).I64(rows*c).I64(c).Bytes(x0.bytes()).I64(base).U32(key[0]).U32(key[1]).F64(p))
}

// dropoutBackward sets dx = dy·mask/(1−p) with the mask biasDropoutAdd drew for the same
// key and region.
func (b *Backend) dropoutBackward(dx, dy tensor.Span, p float64, key [2]uint32, r dropoutRegion) {
	release := b.dev.bind()
	defer release()
	n := int64(dy.Numel())
	x0, base := r.maskIdx(dy)
	b.run("fused", "dropout_bwd", n, driver.NewKernelArgs().Ptr(b.ptr("DropoutBackward", dx)).Ptr(b.ptr("DropoutBackward", dy)).
		I32(dtArg(dy.DType)).I64(n).Bytes(x0.bytes()).I64(base).U32(key[0]).U32(key[1]).F64(p))
}

// addLayerNorm sets sum = x + res (rounded to x's dtype) and y = LayerNorm(sum) with
// per-row mean and rstd (CPU twin: LayerNorm(Add(x, res), w, bias, eps)). w and bias may
// be empty.
func (b *Backend) addLayerNorm(y, sum, mean, rstd, x, res, w, bias tensor.Span, eps float64) {
	release := b.dev.bind()
	defer release()
	b.normForward("AddLayerNorm", y, mean, rstd, x, res, sum, w, bias, eps, false)
}

// addRMSNorm sets sum = x + res and y = RMSNorm(sum) (CPU twin: RMSNorm(Add(x, res), w,
// eps)).
func (b *Backend) addRMSNorm(y, sum, rstd, x, res, w tensor.Span, eps float64) {
	release := b.dev.bind()
	defer release()
	b.normForward("AddRMSNorm", y, tensor.Span{}, rstd, x, res, sum, w, tensor.Span{}, eps, true)
}

// layerNormBackwardAdd is LayerNormBackward for the norm of sum (x here) whose output
// gradient is dy, adding dextra (the gradient reaching sum from the residual stream; may
// be empty) into dx, which is then the gradient of both addends of addLayerNorm.
func (b *Backend) layerNormBackwardAdd(dx, dw, db, dy, x, w, dextra, mean, rstd tensor.Span) {
	release := b.dev.bind()
	defer release()
	b.normBackward("LayerNormBackwardAdd", dx, dw, db, dy, x, w, dextra, mean, rstd)
}

// rmsNormBackwardAdd is RMSNormBackward with dextra added into dx.
func (b *Backend) rmsNormBackwardAdd(dx, dw, dy, x, w, dextra, rstd tensor.Span) {
	release := b.dev.bind()
	defer release()
	b.normBackward("RMSNormBackwardAdd", dx, dw, tensor.Span{}, dy, x, w, dextra, tensor.Span{}, rstd)
}

// rope rotates x [B, NH, T, HS] by the positions [T] (I32 or I64) as Hugging Face Llama's
// rotate_half does with frequency θ^(−2i/HS); inverse rotates back, which is the
// backward. y may be x.
func (b *Backend) rope(y, x, positions tensor.Span, theta float64, inverse bool) {
	release := b.dev.bind()
	defer release()
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
	b.run("fused", "rope", bnh*t*hs/2, driver.NewKernelArgs().Ptr(b.ptr("RoPE", y)).Ptr(b.ptr("RoPE", x)).I32(dtArg(x.DType)).
		Ptr(b.ptr("RoPE", positions)).I32(dtArg(positions.DType)).I64(bnh).I64(t).I64(hs).F64(theta).F64(sign))
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
