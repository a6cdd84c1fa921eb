package tensor

import "runtime"

// Splitting one SGEMM (gemm.go) across goroutines: bands of C, the operand they share
// packed where first needed (sharedPack), and the fork they run on (gemmParallel, over
// pullItems in cpu_fork.go).

// gemmRowBandPanels is the fewest mr-row panels a row band must hold for sgemmSplit to cut
// C into row bands (sharing B's packed panels) rather than column bands (reading A in
// place, or sharing its packed panels) when N ≥ M. A row band streams each B block
// through L2 once and reuses it for all its A panels; a column band brings each A panel
// into L1 for only nc/nr tiles, from memory or another core's cache. On 2 threads of a
// Zen 5 VM, 2048³ and 768…1024 rows by 2…3 times as many columns ran 10-15% faster as
// row bands; 512 rows by 2048 columns, and 256-row products, ran faster as column bands.
const gemmRowBandPanels = 16

// sgemmSplit computes one matrix product on several goroutines: it cuts C into bands of
// whole tiles, along its columns when C is wide (see gemmRowBandPanels) and its rows
// otherwise, and lets the goroutines pull bands. The operand every band needs (A for
// column bands, unless read in place; B for row bands) is packed once, each panel by the
// goroutine that needs it first.
func sgemmSplit(kern *gemmKernel, c, a, b []float32, p *MatMulParams, plan gemmPlan, workers int) {
	M, N, K := p.M, p.N, p.K
	tall := M >= gemmRowBandPanels*kern.mr*gemmBandsPerWorker*workers
	byCols := N >= M && (!tall || plan.directA && N >= 2*M)
	ext, unit := M, kern.mr
	if byCols {
		ext, unit = N, kern.nr
		// Shared, A's packed panels would each be read into L1 for only nc/nr tiles, often
		// from another core's cache: in place measured faster even with A's rows a multiple
		// of 4 KiB apart (256×3072·3072×768 by 6%, 256×4096·4096×1024 by 8%).
		plan.directA = plan.directA || !p.TransA && kern.tileRowA != nil
	}
	band := gemmBandFor(ext, unit, workers, M*N*K)
	bands := (ext + band - 1) / band
	workers = min(workers, bands)

	// The shared operand: A's mr-row panels (when C is cut into column bands and A is
	// not read in place) or B's nr-column panels (row bands, unless B is read in place
	// with A: W2's dx = dy·W, 2048×1024·1024×256, ran 360 GFLOP/s against 342 packed).
	sh := gemmShared.Get().(*sharedBuf)
	var shared sharedPack
	plan.shared = &shared
	switch {
	case byCols && !plan.directA:
		lda := K
		if p.TransA {
			lda = M
		}
		plan.aShared, plan.mPad = shared.init(sh, M, kern.mr, kern.kc, K, func(dst []float32, i0, i1, pc, kb int) {
			packA(kern, dst, a, p.TransA, lda, i0, i1-i0, pc, kb)
		})
	case !byCols && !plan.bInPlace():
		ldb := N
		if p.TransB {
			ldb = K
		}
		plan.bShared, plan.nPad = shared.init(sh, N, kern.nr, kern.kc, K, func(dst []float32, j0, j1, pc, kb int) {
			packB(kern, dst, b, p.TransB, ldb, pc, kb, j0, j1-j0)
		})
	}

	// Nobody waits for a packing phase: a goroutine the OS starts late (waking an idle CPU
	// can take tens of microseconds in a VM) finds panels packed, and panels packed as
	// they are needed are still in cache when used.
	gemmParallel(bands, workers, func(w *gemmWorker, i int) {
		lo, hi := i*band, min(ext, (i+1)*band)
		if byCols {
			w.run(kern, c, a, b, p, &plan, 0, M, lo, hi)
		} else {
			w.run(kern, c, a, b, p, &plan, lo, hi, 0, N)
		}
	})
	gemmShared.Put(sh)
}

// gemmBand returns the width of the bands, whole units wide, that cut an extent ext into
// about gemmBandsPerWorker bands per worker.
func gemmBand(ext, unit, workers int) int {
	return max(unit, roundUp((ext+gemmBandsPerWorker*workers-1)/(gemmBandsPerWorker*workers), unit))
}

// gemmParallel runs work(w, i) for each i in [0, n) on up to workers goroutines, the
// calling one included, which pull items (pullItems), each passing its own gemmWorker
// (w.first set from its rank).
func gemmParallel(n, workers int, work func(w *gemmWorker, i int)) {
	workers = min(workers, n, runtime.GOMAXPROCS(0))
	pullItems(n, workers, func(id int) (func(int), func()) {
		w := gemmWorkers.Get().(*gemmWorker)
		w.first = float64(id) / float64(max(1, workers))
		return func(i int) { work(w, i) }, func() { gemmWorkers.Put(w) }
	})
}
