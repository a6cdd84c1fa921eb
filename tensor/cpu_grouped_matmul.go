package tensor

import "runtime"

// GroupedMatMul implements GroupedMatMulKernels: F32, BF16 and F16 in float32 with the
// SGEMM of gemm.go in one fork over all experts (groupedSgemm); F64, or a CPU without a
// SIMD kernel, per expert with MatMul.
func (be cpuBackend) GroupedMatMul(dst, x, w Span, p GroupedMatMulParams) {
	kern := defaultGemmKernel()
	if computeIs64(dst.DType) || kern == nil {
		groupedMatMulEach(be, dst, x, w, p)
		return
	}
	xs, ws, ds := load[float32](x), load[float32](w), output[float32](dst)
	T := dst.Numel() / max(1, p.N) // rows
	workers := max(1, min(runtime.GOMAXPROCS(0), T*p.N*p.K/gemmGrain))
	groupedSgemm(kern, ds, xs, ws, p, workers)
	store(dst, ds)
}

// groupedBand is one item of groupedSgemm's work: rows [m0, m1) of expert e's product,
// whose rows start at row of x and dst.
type groupedBand struct{ e, row, m0, m1 int }

// groupedSgemm computes dst = x·op(w[e]) per group of rows (GroupedMatMulParams) with
// kernel kern on up to workers goroutines. Each expert's rows are cut into bands of
// whole mr-row panels, about T/(gemmBandsPerWorker·2·workers) rows each, and the
// goroutines pull bands of all experts from one counter: a small group is one band, and
// no goroutine waits for one expert to finish before starting the next. Each band packs
// its expert's B panels itself (no sharing across goroutines). A row's value depends
// only on its row of x and its expert's matrix (the driver's results do not depend on
// M or on where a band starts), so it equals MatMul of that row alone, bit for bit.
func groupedSgemm(kern *gemmKernel, dst, x, w []float32, p GroupedMatMulParams, workers int) {
	K, N := p.K, p.N
	T := 0
	for _, c := range p.Counts {
		T += c
	}
	if T == 0 || N == 0 {
		return
	}
	if K == 0 {
		clear(dst[:T*N])
		return
	}
	band := max(4*kern.mr, roundUp((T+2*gemmBandsPerWorker*workers-1)/(2*gemmBandsPerWorker*workers), kern.mr))
	var bands []groupedBand
	row := 0
	for e, c := range p.Counts {
		for m0 := 0; m0 < c; m0 += band {
			bands = append(bands, groupedBand{e: e, row: row, m0: m0, m1: min(c, m0+band)})
		}
		row += c
	}
	plan := gemmPlan{directA: kern.tileRowA != nil && (N <= gemmDirectAMaxN || K%1024 != 0)}
	work := func(gw *gemmWorker, i int) {
		b := bands[i]
		c := p.Counts[b.e]
		mp := MatMulParams{Batch: 1, M: c, N: N, K: K, TransB: p.TransB}
		gw.run(kern, dst[b.row*N:(b.row+c)*N], x[b.row*K:(b.row+c)*K], w[b.e*K*N:(b.e+1)*K*N], &mp, &plan, b.m0, b.m1, 0, N)
	}
	if workers == 1 {
		gw := gemmWorkers.Get().(*gemmWorker)
		for i := range bands {
			work(gw, i)
		}
		gemmWorkers.Put(gw)
		return
	}
	gemmParallel(len(bands), workers, work)
}
