package cuda

import (
	"fmt"
	"slices"

	"megago/cuda/internal/cublaslt"
	"megago/cuda/internal/driver"
	"megago/cuda/internal/kernels"
	"megago/tensor"
)

// Fused attention (kernels/attention.cu) and linear layers with cuBLASLt epilogues.

// attentionVariant checks q's shape and returns the module, the kernels' dtype name and
// suffix, B·NH and T.
func attentionVariant(op string, q tensor.Span) (mod, dt, sfx string, bnh, t int64) {
	if len(q.Shape) != 4 {
		panic(fmt.Sprintf("cuda: %s: q %v, want [B, NH, T, HS]", op, q.Shape))
	}
	hs := q.Shape[3]
	switch q.DType {
	case tensor.BF16:
		dt = "bf16"
	case tensor.F32:
		dt = "f32"
	default:
		panic(fmt.Sprintf("cuda: %s: %v, want bfloat16 or float32", op, q.DType))
	}
	if sizes := kernels.AttentionHeadSizes(); !slices.Contains(sizes, hs) {
		panic(fmt.Sprintf("cuda: %s: head size %d, fused attention is built for %v", op, hs, sizes))
	}
	return kernels.AttentionModule(dt, hs), dt, fmt.Sprintf("%s_%d", dt, hs), int64(q.Shape[0] * q.Shape[1]), int64(q.Shape[2])
}

// Tiles of attention.cu: queries per block of the forward and dQ kernels, keys per block
// of the dK/dV kernel.
const attnQueriesPerBlock = 64

func attnKeysPerBlock(hs int) int64 {
	if hs <= 64 {
		return 64
	}
	return 32
}

// flashAttention sets out = softmax(scale·q·kᵀ (causal: key j hidden from query i > j))·v
// and lse [B·NH, T] (F32) to each query's log-sum-exp, without storing the scores. q, k,
// v and out are [B, NH, T, HS] in bf16 or f32 with HS 32, 64 or 128 (CPU twin:
// MatMul(Softmax(MatMulT(q, k, false, true), {Scale, Causal}), v)). It panics on other
// shapes or dtypes.
func (b *Backend) flashAttention(out, lse, q, k, v tensor.Span, scale float64, causal bool) {
	mod, _, sfx, bnh, t := attentionVariant("FlashAttention", q)
	release := b.dev.bind()
	defer release()
	const op = "FlashAttention"
	grid := [3]uint32{uint32((t + attnQueriesPerBlock - 1) / attnQueriesPerBlock), uint32(bnh), 1}
	b.must(b.dev.launch(mod, "flash_fwd_"+sfx, grid, [3]uint32{attnQueriesPerBlock, 1, 1}, 0, driver.NewKernelArgs().
		Ptr(b.ptr(op, out)).Ptr(b.ptr(op, lse)).Ptr(b.ptr(op, q)).Ptr(b.ptr(op, k)).Ptr(b.ptr(op, v)).I64(t).
		F32(float32(scale)).I32(boolArg(causal))))
}

// flashAttentionBackward sets dq, dk and dv from dout, recomputing the scores from q, k
// and flashAttention's out and lse.
func (b *Backend) flashAttentionBackward(dq, dk, dv, q, k, v, out, lse, dout tensor.Span, scale float64, causal bool) {
	mod, dt, sfx, bnh, t := attentionVariant("FlashAttentionBackward", q)
	release := b.dev.bind()
	defer release()
	const op = "FlashAttentionBackward"
	hs := q.Shape[3]
	d, err := b.alloc.get(max(1, bnh*t) * 4) // D = rowsum(dO ∘ O)
	b.must(err)
	defer b.alloc.put(d)
	b.run(mod, "flash_bwd_pre_"+dt, bnh*t, driver.NewKernelArgs().Ptr(d).Ptr(b.ptr(op, out)).Ptr(b.ptr(op, dout)).
		I64(bnh*t).I64(int64(hs)))
	common := func(a *driver.KernelArgs) *driver.KernelArgs {
		return a.Ptr(b.ptr(op, q)).Ptr(b.ptr(op, k)).Ptr(b.ptr(op, v)).Ptr(b.ptr(op, dout)).Ptr(b.ptr(op, lse)).Ptr(d).
			I64(t).F32(float32(scale)).I32(boolArg(causal))
	}
	kb := attnKeysPerBlock(hs)
	b.must(b.dev.launch(mod, "flash_bwd_dkdv_"+sfx, [3]uint32{uint32((t + kb - 1) / kb), uint32(bnh), 1},
		[3]uint32{uint32(kb), 1, 1}, 0, common(driver.NewKernelArgs().Ptr(b.ptr(op, dk)).Ptr(b.ptr(op, dv)))))
	b.must(b.dev.launch(mod, "flash_bwd_dq_"+sfx, [3]uint32{uint32((t + attnQueriesPerBlock - 1) / attnQueriesPerBlock), uint32(bnh), 1},
		[3]uint32{attnQueriesPerBlock, 1, 1}, 0, common(driver.NewKernelArgs().Ptr(b.ptr(op, dq)))))
}

// linear sets y [M, N] = x [M, K]·wᵀ (w [N, K], PyTorch's layout) + bias [N], then GeLU
// when gelu is set, in one cuBLASLt call; preact [M, N], when not empty, receives the
// input of the GeLU for the backward (CPU twin: GeLU(Add(MatMulT(x, w, false, true),
// bias))). bias may be empty. With the GeLU epilogues cuBLASLt wants N (the leading
// dimension of preact) a multiple of 8; other sizes fail with its error.
func (b *Backend) linear(y, preact, x, w, bias tensor.Span, gelu bool) {
	release := b.dev.bind()
	defer release()
	const op = "Linear"
	m, k := lastDim(x)
	n := int64(w.Shape[0])
	epi := cublaslt.EpilogueDefault
	switch {
	case gelu && !bias.Empty() && !preact.Empty():
		epi = cublaslt.EpilogueGeLUAuxBias
	case gelu && !bias.Empty():
		epi = cublaslt.EpilogueGeLUBias
	case gelu && !preact.Empty():
		epi = cublaslt.EpilogueGeLUAux
	case gelu:
		epi = cublaslt.EpilogueGeLU
	case !bias.Empty():
		epi = cublaslt.EpilogueBias
	}
	g := cublaslt.Gemm{Type: gemmType(op, x.DType), M: int(m), N: int(n), K: int(k), TransB: true, Epilogue: epi, AllowTF32: b.cfg.AllowTF32}
	b.must(b.dev.gemm(g, 1, b.ptr(op, x), b.ptr(op, w), b.ptr(op, y), b.ptr(op, bias), b.ptr(op, preact)))
}

// linearBackwardData sets dx [M, K] = dy [M, N]·w [N, K]. When geluPre (the GeLU input
// saved by the previous layer's linear, [M, K]) is not empty, dx is multiplied by
// gelu'(geluPre) — the backward through that GeLU — and dbiasPrev, when not empty,
// receives the column sums of the result (that layer's bias gradient).
func (b *Backend) linearBackwardData(dx, dbiasPrev, dy, w, geluPre tensor.Span) {
	release := b.dev.bind()
	defer release()
	const op = "LinearBackwardData"
	m, n := lastDim(dy)
	k := int64(w.Shape[1])
	epi := cublaslt.EpilogueDefault
	if !geluPre.Empty() {
		epi = cublaslt.EpilogueDGeLU
		if !dbiasPrev.Empty() {
			epi = cublaslt.EpilogueDGeLUBGrad
		}
	}
	g := cublaslt.Gemm{Type: gemmType(op, dy.DType), M: int(m), N: int(k), K: int(n), Epilogue: epi, AllowTF32: b.cfg.AllowTF32}
	b.must(b.dev.gemm(g, 1, b.ptr(op, dy), b.ptr(op, w), b.ptr(op, dx), b.ptr(op, dbiasPrev), b.ptr(op, geluPre)))
}

// linearBackwardWeight sets dw [N, K] = dyᵀ·x (adding to dw when accumulate) and, when
// dbias is not empty, dbias [N] = Σ_rows dy in the same cuBLASLt call (overwritten, not
// accumulated).
func (b *Backend) linearBackwardWeight(dw, dbias, dy, x tensor.Span, accumulate bool) {
	release := b.dev.bind()
	defer release()
	const op = "LinearBackwardWeight"
	m, n := lastDim(dy)
	k := int64(x.Shape[len(x.Shape)-1])
	epi := cublaslt.EpilogueDefault
	if !dbias.Empty() {
		epi = cublaslt.EpilogueBGradB
	}
	g := cublaslt.Gemm{Type: gemmType(op, dy.DType), M: int(n), N: int(k), K: int(m), TransA: true, Epilogue: epi,
		Accumulate: accumulate, AllowTF32: b.cfg.AllowTF32}
	b.must(b.dev.gemm(g, 1, b.ptr(op, dy), b.ptr(op, x), b.ptr(op, dw), b.ptr(op, dbias), 0))
}
