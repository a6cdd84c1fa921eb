package tensor

import (
	"runtime"
	"sync"
	"unsafe"
)

// The float32 GEMM behind MatMul, in the BLIS/GotoBLAS scheme. The portable kernel in
// cpu_matmul.go (matmulRef) states the semantics; this file is the fast path:
//
//	for pc over K in blocks of kc (always in increasing order):
//	    for ic over M in blocks of mc:        pack op(A)[ic:ic+mc, pc:pc+kc] into mr-row panels
//	        for jc over N in blocks of nc:    pack op(B)[pc:pc+kc, jc:jc+nc] into nr-column panels
//	            for ir in steps of mr:        the A panel (mr×kc) stays in L1
//	                for jr in steps of nr:    B panels stream from L2
//	                    micro-kernel: C[ir:ir+mr, jr:jr+nr] (+)= Apanel · Bpanel
//
// Packing absorbs the transposes (all four combinations read their operands in place) and
// pads edge panels with zeros, so the micro-kernel only ever sees full mr×nr tiles; edge
// tiles of C go through a small scratch tile, a last panel of fewer rows through an edge
// kernel that computes only those (gemmKernel.edges). Full A panels are read in place instead of
// packed (tileRowA, tileColA) when that measured faster: A transposed, or A's rows not a
// multiple of 4 KiB apart, or C narrow (gemmDirectAMaxN); B too, not transposed, when A
// is read in place by rows (gemmDirectB: a Linear's dx = dy·W). When A needs no packing per
// block (read in place, or shared), the ic and jc loops swap, so each B block is packed
// once. C whose rows are a multiple of 4 KiB apart is computed in a padded band and copied
// out. Goroutines pull whole matrices of a batch, or bands of whole tiles of one matrix;
// the operand all bands share is packed once, panel by panel, by the goroutine that first
// needs it (sgemmSplit).
//
// Numerics: within a kc block each element of C is a chain of fused multiply-adds over k
// in increasing order, starting from zero; the block's sum is then added to C (or stored,
// for the first block when not accumulating). The kc blocking depends only on K and the
// kernel, never on the number of goroutines, which split C into disjoint tiles: results are
// bitwise identical for any GOMAXPROCS. They differ from matmulRef's (a plain running sum,
// rounded after every multiply) only by float32 rounding.

// gemmKernel is a micro-kernel and the cache blocking that feeds it.
type gemmKernel struct {
	name       string
	mr, nr     int // register tile: mr rows by nr columns of C
	kc, mc, nc int // cache blocks: kc of K, mc rows of op(A), nc columns of op(B)
	// tile sets the mr×nr tile at c (row stride ldc elements) to, or adds to it when
	// acc != 0, the product of the packed panels a (kc×mr, k-major) and b (kc×nr, k-major).
	tile func(k int, a, b, c *float32, ldc int, acc int)
	// tileRowA and tileColA, when set, are tile reading A in place instead of packed:
	// mr rows lda floats apart with k contiguous (A not transposed), or for each k mr
	// contiguous values, k steps lda floats apart (A transposed). They save packing A
	// when few columns of C share it.
	tileRowA, tileColA func(k int, a *float32, lda int, b, c *float32, ldc int, acc int)
	// tileRowAB, when set, is tileRowA reading B in place too: for each k nr contiguous
	// floats, k steps ldb floats apart (B not transposed). It saves packing B (a Linear's
	// dx = dy·W reads each weight a second time to pack it).
	tileRowAB func(k int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int, acc int)
	// tilePart, when set, is tileRowA computing part of the tile's k steps (macroParts): it
	// starts from the accumulators at t (part&1, mr×nr floats) or zero, leaves them at t
	// (part&2) or stores them to C as tile does, and prefetches one cache line per k step
	// from pf on (instead of the next B panel).
	tilePart func(k int, a *float32, lda int, b, c *float32, ldc int, acc int, pf, t *float32, part int)
	// panelA and panelB, when set, pack one panel (mr rows of A, nr columns of B) from an
	// operand whose k index is contiguous (A not transposed, B transposed):
	// dst[kk·w + r] = src[r·ld + kk] for kk < k, a multiple of 16, and r < rows ≤ w;
	// rows past rows are zero (and not read).
	panelA, panelB func(dst, src *float32, ld, k, rows int)
	// copyA and copyB, when set, pack several full panels from an operand stored k-major
	// (A transposed, B not): dst[p·w·k + kk·w + c] = src[kk·ld + p·w + c].
	copyA, copyB func(dst, src *float32, ld, k, panels int)
	// edges, when set, are kernels for a last, partial panel of fewer than mr rows, by
	// increasing mr, each with tile, tileRowA and tileColA: their tile reads the first of
	// their mr rows from a panel packed mr (this kernel's) floats per k step. They save
	// the work of a full tile and, for A read in place, packing the partial panel.
	edges []*gemmKernel
}

// edge returns the kernel that computes a panel of rows rows (rows ≤ mr): the edge kernel
// with the fewest rows not under rows, or kern.
func (kern *gemmKernel) edge(rows int) *gemmKernel {
	for _, e := range kern.edges {
		if e.mr >= rows {
			return e
		}
	}
	return kern
}

// gemmDirectAMaxN is the widest C (columns) for which A, when not transposed, is read in
// place rather than packed even when its rows are a multiple of 4 KiB apart. Packing costs
// a pass over A (for C this narrow, shared by few B panels); reading mr rows in place
// costs cache conflicts when they all map to the same L1 sets, which a row stride of a
// multiple of 4 KiB (K a multiple of 1024) causes. Other strides are read in place at any
// N; A transposed (k steps contiguous) always is; so is A when sgemmSplit cuts C into
// column bands. All measured on the workload shapes.
const gemmDirectAMaxN = 256

// gemmBandsPerWorker is how many bands sgemmSplit cuts a matrix into per goroutine. Each
// band reads all of the shared operand, so fewer bands mean less traffic; more let a
// goroutine on a slower or busier CPU hold the others up less. 1, 2 and 4, and bands
// shrinking as they are handed out, measured within a few percent of each other on the
// workload shapes on 2 threads (shrinking bands lost at 2048³: each band re-reads B).
// Cutting the last bands again (each of the last `workers` bands into 2 or 4, of at
// least 2-4 tiles), so that goroutines finish closer together, was within the noise (±3%)
// of W1 and W2 steps alternated in one process on a loaded machine, for row and column
// bands alike: the tail a goroutine waits for is mostly the OS running it late, not
// band size.
const gemmBandsPerWorker = 2

// gemmBandWork is the most multiply-adds a band of a large product holds (sgemmSplit then
// cuts it into more than gemmBandsPerWorker bands a goroutine), about 1.5 ms of one core:
// the goroutine that takes the last band runs alone until it ends, and the goroutines
// start apart by up to a few milliseconds when the OS is slow to run the helper. W1's
// LM-head products (256×768·768×50304 and its weight gradient, 10G multiply-adds) cut
// into 4 bands of 13-16 ms left one goroutine alone for 1.5-5 ms per product.
const gemmBandWork = 1 << 28

// gemmMinBandUnits is the fewest tiles (mr rows or nr columns) across that a band cut for
// gemmBandWork holds: each band reads all of the operand the bands share (in place, or
// packed once), so narrow bands would multiply that traffic.
const gemmMinBandUnits = 16

// gemmBandFor returns the width of the bands, whole units wide, that cut an extent ext of
// a product of work multiply-adds for workers goroutines: gemmBand's, narrower when a band
// would hold more than gemmBandWork, down to gemmMinBandUnits units.
func gemmBandFor(ext, unit, workers, work int) int {
	bands := max(1, (work+gemmBandWork-1)/gemmBandWork)
	small := max(roundUp((ext+bands-1)/bands, unit), gemmMinBandUnits*unit)
	return min(gemmBand(ext, unit, workers), small)
}

// gemmGrain is the amount of work (M·N·K multiply-adds) below which a GEMM is not worth
// splitting across goroutines.
const gemmGrain = 1 << 20

// gemmWorker holds one goroutine's packing buffers.
type gemmWorker struct {
	apack, bpack []float32
	cpad         []float32 // a band of C with padded rows (see run)
	tmp          []float32 // one mr×nr tile
	spill        []float32 // gemmFewPanels tiles' accumulators between parts (macroParts)
	first        float64   // where in a shared range this goroutine starts packing (sharedPack.ensure)
}

// gemmWorkers recycles packing buffers between calls, so a training step does not
// allocate megabytes per matrix multiply.
var gemmWorkers = sync.Pool{New: func() any { return new(gemmWorker) }}

// gemmShared recycles the operand that the goroutines splitting one matrix share.
var gemmShared = sync.Pool{New: func() any { return new(sharedBuf) }}

// gemmPlan is how one matrix product is computed: whether A is read in place, and an
// operand packed once for all goroutines (nil: each packs its own).
type gemmPlan struct {
	directA bool
	directB bool        // B may be read in place, and is when A is (bInPlace; gemmDirectB)
	aShared []float32   // all of op(A), packed per kc block: block pc at mPad·pc
	bShared []float32   // all of op(B), packed per kc block: block pc at nPad·pc
	shared  *sharedPack // packs the panels of aShared or bShared as they are first needed
	mPad    int         // M rounded up to mr
	nPad    int         // N rounded up to nr
}

// sgemm computes dst[i] = op(a[i])·op(b[i]) (or dst[i] += ... when p.Accumulate) for each
// batch i with kernel kern on up to workers goroutines (see gemmWorkersFor). a, b and dst
// are laid out as MatMulParams describes.
//
// Goroutines pull work from a counter (whole matrices of a batch, or bands of one matrix)
// so that one slowed by a busy machine holds the others up by one band at most. Who
// computes a tile never changes its value.
func sgemm(kern *gemmKernel, dst, a, b []float32, p MatMulParams, workers int) {
	M, N, K := p.M, p.N, p.K
	if p.Batch == 0 || M == 0 || N == 0 {
		return
	}
	if K == 0 {
		if !p.Accumulate {
			clear(dst[:p.Batch*M*N])
		}
		return
	}
	workers = max(1, workers)
	plan := gemmPlan{directA: kern.tileRowA != nil && !p.TransA && (N <= gemmDirectAMaxN || K%1024 != 0)}
	if p.TransA { // k steps of A in place are contiguous: as good as packed at any N
		plan.directA = kern.tileColA != nil
	}
	plan.directB = gemmDirectB(kern, &p)
	matrix := func(bi int) (c, a1, b1 []float32) { return dst[bi*M*N:], a[bi*p.StrideA:], b[bi*p.StrideB:] }
	switch {
	case workers == 1:
		w := gemmWorkers.Get().(*gemmWorker)
		for bi := 0; bi < p.Batch; bi++ {
			c, a1, b1 := matrix(bi)
			w.run(kern, c, a1, b1, &p, &plan, 0, M, 0, N)
		}
		gemmWorkers.Put(w)
	case p.Batch >= 2*workers:
		// Whole matrices per goroutine (attention's batched products).
		gemmParallel(p.Batch, workers, func(w *gemmWorker, bi int) {
			c, a1, b1 := matrix(bi)
			w.run(kern, c, a1, b1, &p, &plan, 0, M, 0, N)
		})
	default:
		for bi := 0; bi < p.Batch; bi++ {
			c, a1, b1 := matrix(bi)
			sgemmSplit(kern, c, a1, b1, &p, plan, workers)
		}
	}
}

// bInPlace reports whether the tiles read B in place (tileRowAB): B may be (directB)
// and A is read in place too (directA, which sgemmSplit may still turn on).
func (p *gemmPlan) bInPlace() bool { return p.directB && p.directA }

// gemmDirectB reports whether B may be read in place (tileRowAB) wherever A is read in
// place by rows: B not transposed, every tile full width (N a multiple of nr), and every
// panel of A read in place (a last, partial panel has an edge kernel of its own rows).
func gemmDirectB(kern *gemmKernel, p *MatMulParams) bool {
	if kern.tileRowAB == nil || p.TransA || p.TransB || p.N%kern.nr != 0 {
		return false
	}
	r := p.M % kern.mr
	return r == 0 || kern.edge(r).mr == r && kern.edge(r).tileRowAB != nil
}

// grow returns s resized to n elements, reallocating when its capacity is short. The
// data is aligned to 64 bytes (a cache line, an AVX-512 vector).
func grow(s []float32, n int) []float32 {
	if cap(s) >= n {
		return s[:n]
	}
	buf := make([]float32, n+16)
	off := int((64 - uintptr(unsafe.Pointer(&buf[0]))%64) % 64 / 4)
	return buf[off : off+n : off+n]
}

// run computes rows [m0, m1) and columns [n0, n1) of one matrix product: c is the batch's
// C (row stride N), a and b its operands; plan says where A and B panels come from.
func (w *gemmWorker) run(kern *gemmKernel, c, a, b []float32, p *MatMulParams, plan *gemmPlan, m0, m1, n0, n1 int) {
	M, N, K := p.M, p.N, p.K
	mr, nr := kern.mr, kern.nr
	lda, ldb := K, N
	if p.TransA {
		lda = M
	}
	if p.TransB {
		ldb = K
	}
	mc := roundUp(min(kern.mc, m1-m0), mr)
	nc := roundUp(min(kern.nc, n1-n0), nr)
	kc := min(kern.kc, K)
	if plan.aShared == nil {
		w.apack = grow(w.apack, mc*kc)
	}
	if plan.bShared == nil && !plan.bInPlace() {
		w.bpack = grow(w.bpack, nc*kc)
	}
	w.tmp = grow(w.tmp, mr*nr)

	cd, ldc, ci, cj, padded := w.cBand(kern, c, p, m0, m1, n0, n1)
	// When A's panels need no packing here (shared, or read in place), each B block is
	// packed once and swept by all of A's rows; otherwise each A block is packed once and
	// swept by all of B's columns.
	aFree := plan.aShared != nil || plan.directA
	for pc := 0; pc < K; pc += kern.kc {
		kb := min(kern.kc, K-pc)
		acc := 0
		if pc > 0 || p.Accumulate {
			acc = 1
		}
		block := func(ic, mb, jc, nb int, ad, ap, bp []float32, ldbd int) {
			next := plan.nextB(kern, K, pc, jc+nb, n0, n1)
			w.macro(kern, cd[(ic-ci)*ldc+jc-cj:], ldc, ap, bp, ad, lda, ldbd, p.TransA, mb, nb, kb, acc, next)
		}
		if aFree {
			for jc := n0; jc < n1; jc += nc {
				nb := min(nc, n1-jc)
				bp, ldbd := w.panelsB(kern, b, p, plan, ldb, jc, nb, pc, kb)
				for ic := m0; ic < m1; ic += mc {
					mb := min(mc, m1-ic)
					ad, ap := w.panelsA(kern, a, p, plan, lda, ic, mb, pc, kb)
					block(ic, mb, jc, nb, ad, ap, bp, ldbd)
				}
			}
			continue
		}
		for ic := m0; ic < m1; ic += mc {
			mb := min(mc, m1-ic)
			ad, ap := w.panelsA(kern, a, p, plan, lda, ic, mb, pc, kb)
			for jc := n0; jc < n1; jc += nc {
				nb := min(nc, n1-jc)
				bp, ldbd := w.panelsB(kern, b, p, plan, ldb, jc, nb, pc, kb)
				block(ic, mb, jc, nb, ad, ap, bp, ldbd)
			}
		}
	}
	if padded {
		for i := m0; i < m1; i++ {
			copy(c[i*N+n0:i*N+n1], cd[(i-m0)*ldc:(i-m0)*ldc+n1-n0])
		}
	}
}

// nextB returns the shared packed B panel that run, computing columns [n0, n1), reads
// after the panels of kc block pc that end at column j: the next panel of block pc, or
// the first of the next block, or, after the last, the first of block pc (read already).
// It returns nil when B is not shared.
func (p *gemmPlan) nextB(kern *gemmKernel, K, pc, j, n0, n1 int) *float32 {
	switch {
	case p.bShared == nil:
		return nil
	case j < n1:
		return &p.bShared[p.nPad*pc+j*min(kern.kc, K-pc)]
	case pc+kern.kc < K:
		pc += kern.kc
	}
	return &p.bShared[p.nPad*pc+n0*min(kern.kc, K-pc)]
}

// cBand returns where run computes rows [m0, m1) and columns [n0, n1) of C (row stride N):
// C's element (i, j) is at cd[(i-ci)·ldc + j-cj]. That is C itself, or, when C's rows are
// a multiple of 4 KiB apart and visited once per kc block, a band with padded rows (a
// tile's rows would otherwise share L1 sets, evicting the A panel each visit), holding C's
// values when accumulating (padded), which run copies out at the end.
func (w *gemmWorker) cBand(kern *gemmKernel, c []float32, p *MatMulParams, m0, m1, n0, n1 int) (cd []float32, ldc, ci, cj int, padded bool) {
	N := p.N
	if N%1024 != 0 || p.K <= kern.kc {
		return c, N, 0, 0, false
	}
	ldc = roundUp(n1-n0, 16) + 16
	w.cpad = grow(w.cpad, (m1-m0)*ldc)
	if p.Accumulate {
		for i := m0; i < m1; i++ {
			copy(w.cpad[(i-m0)*ldc:(i-m0)*ldc+n1-n0], c[i*N+n0:i*N+n1])
		}
	}
	return w.cpad, ldc, m0, n0, true
}

// panelsA returns where the A panels of rows [ic, ic+mb) of kc block pc (kb deep) come
// from: ad, A in place from element (ic, pc) (nil unless plan.directA), and ap, packed
// panels from row ic (the shared ones, packed where missing, or packed here into apack;
// with ad, only a last, partial panel is, unless an edge kernel reads it in place).
func (w *gemmWorker) panelsA(kern *gemmKernel, a []float32, p *MatMulParams, plan *gemmPlan, lda, ic, mb, pc, kb int) (ad, ap []float32) {
	switch {
	case plan.aShared != nil:
		plan.shared.ensure(pc, ic, ic+mb, w.first)
		return nil, plan.aShared[plan.mPad*pc+ic*kb:]
	case plan.directA:
		if p.TransA {
			ad = a[pc*lda+ic:]
		} else {
			ad = a[ic*lda+pc:]
		}
		full := mb / kern.mr * kern.mr
		if r := mb - full; r > 0 && kern.edge(r).mr != r { // else read in place too (macro)
			packA(kern, w.apack[full*kb:], a, p.TransA, lda, ic+full, r, pc, kb)
		}
		return ad, w.apack
	}
	packA(kern, w.apack, a, p.TransA, lda, ic, mb, pc, kb)
	return nil, w.apack
}

// panelsB returns the B panels of columns [jc, jc+nb) of kc block pc (kb deep), from
// column jc: the shared ones, packed where missing, or packed here into bpack (ldbd 0),
// or, when B is read in place (plan.bInPlace), B from element (pc,
// jc) with row stride ldbd = ldb.
func (w *gemmWorker) panelsB(kern *gemmKernel, b []float32, p *MatMulParams, plan *gemmPlan, ldb, jc, nb, pc, kb int) (bp []float32, ldbd int) {
	switch {
	case plan.bShared != nil:
		plan.shared.ensure(pc, jc, jc+nb, w.first)
		return plan.bShared[plan.nPad*pc+jc*kb:], 0
	case plan.bInPlace():
		return b[pc*ldb+jc:], ldb
	}
	packB(kern, w.bpack, b, p.TransB, ldb, pc, kb, jc, nb)
	return w.bpack, 0
}

func roundUp(n, m int) int { return (n + m - 1) / m * m }

// gemmTileGo is the portable micro-kernel, with the semantics every assembly kernel
// implements (see gemmKernel.tile): it lets the blocked driver run, and be tested, on any
// CPU. Whether x*y+t is fused depends on the Go compiler and GOAMD64, so its results may
// differ from the SIMD kernels' by float32 rounding.
func gemmTileGo(mr, nr int) func(k int, a, b, c *float32, ldc int, acc int) {
	return func(k int, a, b, c *float32, ldc int, acc int) {
		as := unsafe.Slice(a, k*mr)
		bs := unsafe.Slice(b, k*nr)
		cs := unsafe.Slice(c, (mr-1)*ldc+nr)
		t := make([]float32, mr*nr)
		for kk := 0; kk < k; kk++ {
			ak, bk := as[kk*mr:kk*mr+mr], bs[kk*nr:kk*nr+nr]
			for i, x := range ak {
				ti := t[i*nr : i*nr+nr]
				for j, y := range bk {
					ti[j] += x * y
				}
			}
		}
		for i := 0; i < mr; i++ {
			row, ti := cs[i*ldc:i*ldc+nr], t[i*nr:i*nr+nr]
			if acc != 0 {
				for j := range row {
					row[j] += ti[j]
				}
			} else {
				copy(row, ti)
			}
		}
	}
}

// gemmKernelGo runs the blocked driver with the portable micro-kernel. It is slower than
// matmulRef (which is what CPUs without a SIMD kernel use); it exists so the driver's
// blocking, packing and splitting are tested on every platform.
var gemmKernelGo = &gemmKernel{name: "go", mr: 4, nr: 8, kc: 64, mc: 32, nc: 64, tile: gemmTileGo(4, 8)}

// gemmWorkersFor returns the number of goroutines for the product p: GOMAXPROCS, fewer when
// each would get less than gemmGrain multiply-adds.
func gemmWorkersFor(p MatMulParams) int {
	return max(1, min(runtime.GOMAXPROCS(0), p.Batch*p.M*p.N*p.K/gemmGrain))
}
