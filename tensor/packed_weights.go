package tensor

import "sync"

// PackedWeights keeps weight matrices packed for the CPU's float32 GEMM (gemm.go), so that
// inference products x·Wᵀ skip packing W on every call. The GEMM packs op(B) = Wᵀ into
// nr-column panels per kc block each time; a decode step multiplies only a few rows (one
// per sequence) by every weight, so that packing, a full pass over all the weights, took
// as long as a third of the multiply-adds. Packed once, W is read as the panels the
// micro-kernel wants, the same ones MatMulT builds, so results are bitwise MatMulT's.
//
// A PackedWeights holds a copy of every weight it has multiplied by (as much memory again
// as those weights): use it for weights that do not change while it is in use
// (inference), one per device. It is safe for concurrent use.
type PackedWeights struct {
	mu sync.Mutex
	m  map[*Tensor]*packedWeight
}

// packedWeight is one W [N, K] packed as op(B) = Wᵀ, in the layout of sgemmSplit's shared
// B: each (kc block, nr-column panel) packed by the first product that needs it, then
// kept.
type packedWeight struct {
	kern *gemmKernel
	sh   sharedPack
}

// NewPackedWeights returns an empty PackedWeights.
func NewPackedWeights() *PackedWeights { return &PackedWeights{m: map[*Tensor]*packedWeight{}} }

// MatMulT returns x·wᵀ for x [..., K] and w [N, K]: [..., N], equal bit for bit to
// MatMulT(x, w, false, true). On the CPU with a SIMD GEMM kernel, for float32 operands
// with gradients off, it packs each panel of w the first time a product needs it and
// keeps it; otherwise (a nil pw or the purego build included) it is MatMulT. It panics as MatMulT does.
func (pw *PackedWeights) MatMulT(x, w *Tensor) *Tensor {
	kern := defaultGemmKernel()
	dev := x.Device()
	if _, cpu := dev.backend.(cpuBackend); pw == nil || kern == nil || !cpu || w.Device() != dev ||
		x.dtype != F32 || w.dtype != F32 || len(x.shape) < 1 || len(w.shape) != 2 || dev.GradEnabled() {
		return MatMulT(x, w, false, true)
	}
	n, k := w.shape[0], w.shape[1]
	m := x.Numel() / max(1, x.shape[len(x.shape)-1])
	if x.shape[len(x.shape)-1] != k || m == 0 || n == 0 || k == 0 {
		return MatMulT(x, w, false, true) // its panics and its empty products
	}
	pk := pw.packed(kern, w)
	shape := append(x.shape[:len(x.shape)-1].Clone(), n)
	out := empty(dev, F32, shape)
	sgemmPacked(kern, raw[float32](out.Span()), raw[float32](x.Span()), pk, MatMulParams{Batch: 1, M: m, N: n, K: k, TransB: true})
	return out
}

// packed returns w's packing for kern, packing it the first time.
func (pw *PackedWeights) packed(kern *gemmKernel, w *Tensor) *packedWeight {
	pw.mu.Lock()
	defer pw.mu.Unlock()
	if pk := pw.m[w]; pk != nil && pk.kern == kern {
		return pk
	}
	n, k := w.shape[0], w.shape[1]
	b := raw[float32](w.Span())
	pk := &packedWeight{kern: kern}
	pk.sh.init(&sharedBuf{}, n, kern.nr, kern.kc, k, func(dst []float32, j0, j1, pc, kb int) {
		packB(kern, dst, b, true, k, pc, kb, j0, j1-j0)
	})
	pw.m[w] = pk
	return pk
}

// sgemmPacked computes c = a·op(B) (p: one product, A not transposed, op(B) packed in pk)
// on up to GOMAXPROCS goroutines, each taking bands of whole columns, reading A in place
// where the kernel can (as sgemmSplit's column bands do).
func sgemmPacked(kern *gemmKernel, c, a []float32, pk *packedWeight, p MatMulParams) {
	plan := gemmPlan{directA: kern.tileRowA != nil, bShared: pk.sh.data, shared: &pk.sh, nPad: pk.sh.pad}
	workers := gemmWorkersFor(p)
	band := gemmBand(p.N, kern.nr, workers)
	bands := (p.N + band - 1) / band
	gemmParallel(bands, workers, func(w *gemmWorker, i int) {
		w.run(kern, c, a, nil, &p, &plan, 0, p.M, i*band, min(p.N, (i+1)*band))
	})
}
