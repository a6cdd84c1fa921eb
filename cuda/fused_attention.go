package cuda

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"megago/cuda/internal/cublaslt"
	"megago/cuda/internal/driver"
	"megago/cuda/internal/kernels"
	"megago/tensor"
)

// Fused attention (kernels/attention.cu) and linear layers with cuBLASLt epilogues.

// attentionVariant checks q's shape and returns the module, the kernels' dtype name and
// suffix, B·NH and Tq.
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

// flashCovers reports whether the flash kernels compute attention of a: q in bf16 or f32
// with a head size they are built for.
func flashCovers(a tensor.AttentionArgs) bool {
	return (a.Q.DType == tensor.BF16 || a.Q.DType == tensor.F32) && len(a.Q.Shape) == 4 &&
		slices.Contains(kernels.AttentionHeadSizes(), a.Q.Shape[3])
}

// flashParams are attention.cu's FP: the sequence lengths, query heads per key/value
// head and query heads, the scale, causality, and the dropout probability, key and the
// placement of the probabilities [B, NH, Tq, Tk] in the full tensor the mask is drawn at
// (strides of its first three dims and the index of this call's first element), the
// padding mask with its strides over [B, NH, Tq, Tk] (0 along broadcast dims) and dtype,
// the segments [B, Tk] (I32), the additive bias with its strides and dtype, and the
// backward's buffer for the logits' gradient (set when the bias's is wanted), and the
// rows of a key/value head in k and v (0 for tk, or the length of the KV-cache slots
// that AttentionSlots reads in place; the forward only). The pointers may be 0.
type flashParams struct {
	tq, tk, group, nh int64
	scale             float32
	causal            bool
	drop              float64
	key               [2]uint32
	ds                [3]int64
	dbase             int64
	mask              driver.DevicePtr
	ms                [4]int64
	mdt               tensor.DType
	seg               driver.DevicePtr
	bias              driver.DevicePtr
	bs                [4]int64
	bdt               tensor.DType
	dsout             driver.DevicePtr
	lkv               int64
}

// flashParams returns the parameters of attention of a with p.
func (b *Backend) flashParams(a tensor.AttentionArgs, p tensor.AttentionParams) flashParams {
	f := newFlashParams(a.Q, a.K, p)
	f.seg = b.ptr("Attention", a.Segments)
	f.mask, f.mdt, f.ms = b.ptr("Attention", a.Mask), a.Mask.DType, scoreStrides(a.Mask.Shape)
	f.bias, f.bdt, f.bs = b.ptr("Attention", a.Bias), a.Bias.DType, scoreStrides(a.Bias.Shape)
	return f
}

// scoreStrides returns the strides over the scores [B, NH, Tq, Tk] of a contiguous
// tensor of shape sh that broadcasts to them: 0 along broadcast dims.
func scoreStrides(sh tensor.Shape) [4]int64 {
	var ss [4]int64
	st := contiguousStrides(sh)
	for d := range min(len(sh), 4) { // right-aligned, as broadcasting aligns shapes
		if sh[len(sh)-1-d] != 1 {
			ss[3-d] = int64(st[len(sh)-1-d])
		}
	}
	return ss
}

// scoreShape returns sh padded on the left with 1s to rank 4.
func scoreShape(sh tensor.Shape) [4]int64 {
	s := [4]int64{1, 1, 1, 1}
	for d := range min(len(sh), 4) {
		s[3-d] = int64(sh[len(sh)-1-d])
	}
	return s
}

// newFlashParams returns the parameters of attention of q [B, NH, Tq, HS] over k
// [B, G, Tk, HS] with p, without mask or segments.
func newFlashParams(q, k tensor.Span, p tensor.AttentionParams) flashParams {
	f := flashParams{tq: int64(q.Shape[2]), tk: int64(k.Shape[2]), group: int64(q.Shape[1] / k.Shape[1]),
		nh: int64(q.Shape[1]), scale: float32(p.Scale), causal: p.Causal, drop: p.Dropout, key: p.Key}
	if p.Dropout > 0 {
		if len(p.Full) != 4 || len(p.Start) != 4 {
			panic(fmt.Sprintf("cuda: Attention: dropout region %v at %v, want rank 4", p.Full, p.Start))
		}
		st := contiguousStrides(p.Full)
		f.ds = [3]int64{int64(st[0]), int64(st[1]), int64(st[2])}
		for d, v := range p.Start {
			f.dbase += int64(v * st[d])
		}
	}
	return f
}

// bytes returns f in FP's layout.
func (f flashParams) bytes() []byte {
	le := binary.LittleEndian
	b := le.AppendUint64(nil, uint64(f.tq))
	b = le.AppendUint64(b, uint64(f.tk))
	b = le.AppendUint64(b, uint64(f.group))
	b = le.AppendUint64(b, uint64(f.nh))
	b = le.AppendUint32(b, math.Float32bits(f.scale))
	b = le.AppendUint32(b, uint32(boolArg(f.causal)))
	b = le.AppendUint64(b, math.Float64bits(f.drop))
	b = le.AppendUint32(b, f.key[0])
	b = le.AppendUint32(b, f.key[1])
	for _, v := range f.ds {
		b = le.AppendUint64(b, uint64(v))
	}
	b = le.AppendUint64(b, uint64(f.dbase))
	b = le.AppendUint64(b, uint64(f.mask))
	for _, v := range f.ms {
		b = le.AppendUint64(b, uint64(v))
	}
	b = le.AppendUint32(b, uint32(dtArg(f.mdt)))
	b = le.AppendUint32(b, 0) // padding: seg is 8-aligned
	b = le.AppendUint64(b, uint64(f.seg))
	b = le.AppendUint64(b, uint64(f.bias))
	for _, v := range f.bs {
		b = le.AppendUint64(b, uint64(v))
	}
	b = le.AppendUint32(b, uint32(dtArg(f.bdt)))
	b = le.AppendUint32(b, 0)
	b = le.AppendUint64(b, uint64(f.dsout))
	lkv := f.lkv
	if lkv == 0 {
		lkv = f.tk
	}
	return le.AppendUint64(b, uint64(lkv))
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

// flashAttention sets out [B, NH, Tq, HS] = dropout(softmax(scale·q·kᵀ with causal
// masking))·v and lse [B·NH, Tq] (F32) to each query's log-sum-exp, without storing the
// scores, for q [B, NH, Tq, HS] and k, v [B, G, Tk, HS] in bf16 or f32 with HS 32, 64 or
// 128 (CPU twin: the CPU backend's Attention without mask, bias or segments). It panics
// on other shapes or dtypes.
func (b *Backend) flashAttention(out, lse, q, k, v tensor.Span, f flashParams) {
	mod, _, sfx, bnh, tq := attentionVariant("FlashAttention", q)
	release := b.dev.bind()
	defer release()
	const op = "FlashAttention"
	grid := [3]uint32{uint32((tq + attnQueriesPerBlock - 1) / attnQueriesPerBlock), uint32(bnh), 1}
	b.must(b.dev.launch(mod, "flash_fwd_"+sfx, grid, [3]uint32{attnQueriesPerBlock, 1, 1}, 0, driver.NewKernelArgs().
		Ptr(b.ptr(op, out)).Ptr(b.ptr(op, lse)).Ptr(b.ptr(op, q)).Ptr(b.ptr(op, k)).Ptr(b.ptr(op, v)).Bytes(f.bytes())))
}

// flashAttentionSlots is flashAttention for each call of as (slotsAlike, with p) over the
// first tk[i] positions of its slots (all of one shape), in one launch of flash_fwd_slots:
// blocks along z are the calls, whose operands, query and key counts come from a table in
// device memory.
func (b *Backend) flashAttentionSlots(as []tensor.AttentionArgs, p tensor.AttentionParams, tk []int) {
	mod, _, sfx, bnh, _ := attentionVariant("FlashAttentionSlots", as[0].Q)
	release := b.dev.bind()
	defer release()
	const op = "FlashAttentionSlots"
	le := binary.LittleEndian
	var tbl []byte // attention.cu's SC per call
	tiles := int64(1)
	for i, a := range as {
		tq := int64(a.Q.Shape[2])
		tiles = max(tiles, (tq+attnQueriesPerBlock-1)/attnQueriesPerBlock)
		for _, s := range []tensor.Span{a.Q, a.K, a.V, a.Out, a.LSE} {
			tbl = le.AppendUint64(tbl, uint64(b.ptr(op, s)))
		}
		tbl = le.AppendUint64(tbl, uint64(tq))
		tbl = le.AppendUint64(tbl, uint64(tk[i]))
	}
	d, err := b.alloc.get(int64(len(tbl)))
	b.must(err)
	defer b.alloc.put(d)
	b.must(b.dev.htod(d, tbl))
	f := newFlashParams(as[0].Q, as[0].K, p) // Tq and Tk come from the table
	f.lkv = int64(as[0].K.Shape[2])
	grid := [3]uint32{uint32(tiles), uint32(bnh), uint32(len(as))}
	b.must(b.dev.launch(mod, "flash_fwd_slots_"+sfx, grid, [3]uint32{attnQueriesPerBlock, 1, 1}, 0,
		driver.NewKernelArgs().Ptr(d).Bytes(f.bytes())))
}

// flashAttentionBackward sets dq, dk and dv from dout and dlse (F32 [B·NH, Tq]; may be
// empty: zeros), recomputing the scores from q, k and flashAttention's out and lse, and,
// when dbias (f.bias's shape) is not empty, dbias through a buffer of the logits'
// gradient [B, NH, Tq, Tk] (F32).
func (b *Backend) flashAttentionBackward(dq, dk, dv, dbias, q, k, v, out, lse, dout, dlse tensor.Span, f flashParams) {
	mod, dt, sfx, bnh, tq := attentionVariant("FlashAttentionBackward", q)
	release := b.dev.bind()
	defer release()
	const op = "FlashAttentionBackward"
	hs := q.Shape[3]
	d, err := b.alloc.get(max(1, bnh*tq) * 4) // D = rowsum(dO ∘ O) − dL
	b.must(err)
	defer b.alloc.put(d)
	b.run(mod, "flash_bwd_pre_"+dt, bnh*tq, driver.NewKernelArgs().Ptr(d).Ptr(b.ptr(op, out)).Ptr(b.ptr(op, dout)).
		Ptr(b.ptr(op, dlse)).I64(bnh*tq).I64(int64(hs)))
	common := func(a *driver.KernelArgs) *driver.KernelArgs {
		return a.Ptr(b.ptr(op, q)).Ptr(b.ptr(op, k)).Ptr(b.ptr(op, v)).Ptr(b.ptr(op, dout)).Ptr(b.ptr(op, lse)).Ptr(d).
			Bytes(f.bytes())
	}
	if !dbias.Empty() {
		n := bnh * tq * f.tk * 4
		ds, err := b.alloc.get(max(1, n))
		b.must(err)
		defer b.alloc.put(ds)
		b.must(b.dev.memset(ds, 4, 0, bnh*tq*f.tk))
		f.dsout = ds
	}
	kb, bkv := attnKeysPerBlock(hs), int64(k.Shape[0]*k.Shape[1])
	b.must(b.dev.launch(mod, "flash_bwd_dkdv_"+sfx, [3]uint32{uint32((f.tk + kb - 1) / kb), uint32(bkv), 1},
		[3]uint32{uint32(kb), 1, 1}, 0, common(driver.NewKernelArgs().Ptr(b.ptr(op, dk)).Ptr(b.ptr(op, dv)))))
	b.must(b.dev.launch(mod, "flash_bwd_dq_"+sfx, [3]uint32{uint32((tq + attnQueriesPerBlock - 1) / attnQueriesPerBlock), uint32(bnh), 1},
		[3]uint32{attnQueriesPerBlock, 1, 1}, 0, common(driver.NewKernelArgs().Ptr(b.ptr(op, dq)))))
	if !dbias.Empty() {
		s := scoreShape(dbias.Shape)
		b.run(mod, "attn_dbias", int64(dbias.Numel()), driver.NewKernelArgs().Ptr(b.ptr(op, dbias)).I32(dtArg(dbias.DType)).
			Ptr(f.dsout).I64(int64(q.Shape[0])).I64(f.nh).I64(tq).I64(f.tk).I64(s[0]).I64(s[1]).I64(s[2]).I64(s[3]))
	}
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
