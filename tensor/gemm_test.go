package tensor

import (
	"math"
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"testing"
)

const gemmU = 0x1p-24 // float32 unit roundoff

// testGemmKernels returns every kernel the blocked driver can run here: the CPU's SIMD
// kernels, each also with tiny cache blocks (so small shapes cross every block boundary)
// and without the in-place A tile (so A is always packed), and the portable tile.
func testGemmKernels() []*gemmKernel {
	ks := []*gemmKernel{gemmKernelGo}
	for _, k := range simdGemmKernels {
		small, packed := *k, *k
		small.name += "/smallblocks"
		small.kc, small.mc, small.nc = 7, 2*k.mr+1, 2*k.nr+3 // mc, nc round up to whole tiles
		packed.name += "/packedA"
		packed.tileRowA, packed.tileColA = nil, nil
		ks = append(ks, k, &small, &packed)
	}
	return ks
}

// gemmCase is one batched product; the operands are laid out as MatMulParams describes.
type gemmCase struct {
	p       MatMulParams
	a, b, c []float32 // c is the initial dst (used when accumulating)
}

func newGemmCase(r *rand.Rand, p MatMulParams) gemmCase {
	na := p.M * p.K
	if p.StrideA > 0 {
		na += (p.Batch - 1) * p.StrideA
	}
	nb := p.K * p.N
	if p.StrideB > 0 {
		nb += (p.Batch - 1) * p.StrideB
	}
	g := gemmCase{p: p, a: make([]float32, na), b: make([]float32, nb), c: make([]float32, p.Batch*p.M*p.N)}
	for _, s := range [][]float32{g.a, g.b, g.c} {
		for i := range s {
			s[i] = float32(r.Float64()*2 - 1)
		}
	}
	return g
}

// want returns the exact product in float64 and, per element, Σ|a·b| (plus |c| when
// accumulating): the scale of the float32 error bound.
func (g gemmCase) want() (val, scale []float64) {
	p := g.p
	val, scale = make([]float64, len(g.c)), make([]float64, len(g.c))
	for bi := 0; bi < p.Batch; bi++ {
		for i := 0; i < p.M; i++ {
			for j := 0; j < p.N; j++ {
				var s, sa float64
				for k := 0; k < p.K; k++ {
					ai := bi*p.StrideA + i*p.K + k
					if p.TransA {
						ai = bi*p.StrideA + k*p.M + i
					}
					bj := bi*p.StrideB + k*p.N + j
					if p.TransB {
						bj = bi*p.StrideB + j*p.K + k
					}
					x := float64(g.a[ai]) * float64(g.b[bj])
					s += x
					sa += math.Abs(x)
				}
				o := (bi*p.M+i)*p.N + j
				if p.Accumulate {
					s += float64(g.c[o])
					sa += math.Abs(float64(g.c[o]))
				}
				val[o], scale[o] = s, sa
			}
		}
	}
	return val, scale
}

func (g gemmCase) run(k *gemmKernel, workers int) []float32 {
	out := append([]float32(nil), g.c...)
	sgemm(k, out, g.a, g.b, g.p, workers)
	return out
}

// runRef runs the portable reference kernel through the backend's Span interface.
func (g gemmCase) runRef() []float32 {
	be := cpuBackend{}
	span := func(v []float32) Span {
		s := Span{Buf: be.Alloc(F32, len(v)), DType: F32, Shape: Shape{len(v)}}
		copy(raw[float32](s), v)
		return s
	}
	dst := span(g.c)
	matmulRef[float32](dst, span(g.a), span(g.b), g.p)
	return raw[float32](dst)
}

func gemmShapes(r *rand.Rand) []MatMulParams {
	var ps []MatMulParams
	add := func(m, n, k int) {
		for _, ta := range []bool{false, true} {
			for _, tb := range []bool{false, true} {
				ps = append(ps, MatMulParams{Batch: 1, M: m, N: n, K: k, TransA: ta, TransB: tb})
			}
		}
	}
	// Every size 1..67 in each dim at least once, with the others random.
	for s := 1; s <= 67; s++ {
		add(s, 1+r.IntN(67), 1+r.IntN(67))
		add(1+r.IntN(67), s, 1+r.IntN(67))
		add(1+r.IntN(67), 1+r.IntN(67), s)
	}
	// Edges of the AVX-512 (12×32) and AVX2 (6×16) tiles.
	for _, m := range []int{5, 6, 7, 11, 12, 13, 24, 25} {
		for _, n := range []int{15, 16, 17, 31, 32, 33, 64, 65} {
			add(m, n, 1+r.IntN(40))
		}
	}
	return ps
}

// checkedCase is a product with its exact result, against which the reference kernel
// has been checked.
type checkedCase struct {
	g           gemmCase
	want, scale []float64
}

func newCheckedCases(t *testing.T, r *rand.Rand, ps []MatMulParams) []checkedCase {
	t.Helper()
	var cases []checkedCase
	for _, p := range ps {
		g := newGemmCase(r, p)
		want, scale := g.want()
		checkGemm(t, "reference", g, g.runRef(), want, scale)
		cases = append(cases, checkedCase{g, want, scale})
	}
	return cases
}

// checkGemm compares got with the exact product: a blocked sum of k products in float32
// (fused or not) is within (k+2)·u·Σ|a·b| of it (the +2 covers adding the block sum to an
// accumulated dst).
func checkGemm(t *testing.T, what string, g gemmCase, got []float32, want, scale []float64) {
	t.Helper()
	bound := float64(g.p.K+2) * gemmU
	for i := range want {
		if d := math.Abs(float64(got[i]) - want[i]); d > bound*scale[i] {
			t.Fatalf("%s %+v: element %d: got %g want %g (diff %g > bound %g)",
				what, g.p, i, got[i], want[i], d, bound*scale[i])
		}
	}
}

func TestSgemmMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(10, 1))
	shapes := gemmShapes(r)
	cases := newCheckedCases(t, r, shapes)
	for _, k := range testGemmKernels() {
		t.Run(k.name, func(t *testing.T) {
			for _, c := range cases {
				checkGemm(t, k.name, c.g, c.g.run(k, 1), c.want, c.scale)
			}
		})
	}
}

func TestSgemmBatchedAndAccumulate(t *testing.T) {
	r := rand.New(rand.NewPCG(10, 2))
	var ps []MatMulParams
	for _, acc := range []bool{false, true} {
		for _, ta := range []bool{false, true} {
			for _, tb := range []bool{false, true} {
				m, n, k := 13, 35, 19
				ps = append(ps,
					MatMulParams{Batch: 3, M: m, N: n, K: k, StrideA: m * k, StrideB: k * n, TransA: ta, TransB: tb, Accumulate: acc},
					MatMulParams{Batch: 4, M: m, N: n, K: k, StrideA: 0, StrideB: k * n, TransA: ta, TransB: tb, Accumulate: acc},
					MatMulParams{Batch: 5, M: m, N: n, K: k, StrideA: m * k, StrideB: 0, TransA: ta, TransB: tb, Accumulate: acc},
					MatMulParams{Batch: 2, M: m, N: n, K: k, StrideA: 0, StrideB: 0, TransA: ta, TransB: tb, Accumulate: acc},
					MatMulParams{Batch: 2, M: m, N: n, K: k, StrideA: m*k + 5, StrideB: k*n + 3, TransA: ta, TransB: tb, Accumulate: acc},
					MatMulParams{Batch: 1, M: 30, N: 70, K: 50, TransA: ta, TransB: tb, Accumulate: acc},
					// C's rows 4 KiB apart and K over a kc block: C goes through a padded band.
					MatMulParams{Batch: 1, M: 3, N: 1024, K: 400, TransA: ta, TransB: tb, Accumulate: acc},
				)
			}
		}
	}
	cases := newCheckedCases(t, r, ps)
	for _, k := range testGemmKernels() {
		t.Run(k.name, func(t *testing.T) {
			for _, c := range cases {
				checkGemm(t, k.name, c.g, c.g.run(k, 1), c.want, c.scale)
				checkGemm(t, k.name+"/3 workers", c.g, c.g.run(k, 3), c.want, c.scale)
			}
		})
	}
}

func TestSgemmEmpty(t *testing.T) {
	for _, k := range testGemmKernels() {
		// K = 0: the product is zero; dst is cleared unless accumulating.
		g := gemmCase{p: MatMulParams{Batch: 2, M: 3, N: 4}, c: []float32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24}}
		for i, v := range g.run(k, 2) {
			if v != 0 {
				t.Fatalf("%s: K=0: element %d = %g, want 0", k.name, i, v)
			}
		}
		g.p.Accumulate = true
		for i, v := range g.run(k, 2) {
			if v != g.c[i] {
				t.Fatalf("%s: K=0 accumulate: element %d = %g, want %g", k.name, i, v, g.c[i])
			}
		}
		g.p = MatMulParams{Batch: 1, M: 0, N: 5, K: 3}
		g.run(k, 2) // must not touch anything
	}
}

// TestSgemmWorkersBitwise checks that the split across goroutines does not change a bit:
// each element's k order is fixed by the kc blocking alone.
func TestSgemmWorkersBitwise(t *testing.T) {
	r := rand.New(rand.NewPCG(10, 3))
	ps := []MatMulParams{
		{Batch: 1, M: 150, N: 130, K: 70},                                              // split along M? N? either
		{Batch: 1, M: 37, N: 700, K: 41, TransB: true},                                 // split along N
		{Batch: 1, M: 700, N: 37, K: 41, TransA: true},                                 // split along M
		{Batch: 3, M: 64, N: 64, K: 64, StrideA: 64 * 64, StrideB: 64 * 64},            // batch 3 on 2 workers: split within
		{Batch: 8, M: 64, N: 64, K: 64, StrideA: 64 * 64, StrideB: 0},                  // whole matrices
		{Batch: 1, M: 90, N: 90, K: 900, TransA: true, TransB: true, Accumulate: true}, // several kc blocks
		// Wide but tall enough for row bands sharing B (gemmRowBandPanels; at some worker
		// counts only), packed where first needed, C's rows padded (N = 1024).
		{Batch: 1, M: 800, N: 1024, K: 400, Accumulate: true},
		{Batch: 1, M: 780, N: 800, K: 120, TransA: true, TransB: true},
		{Batch: 1, M: 800, N: 1700, K: 30}, // A read in place and C twice as wide: column bands
		{Batch: 1, M: 300, N: 320, K: 50},  // the same for the portable kernel's 4-row panels
		{Batch: 1, M: 300, N: 700, K: 30, TransB: true},
		{Batch: 1, M: 40, N: 300, K: 1024, TransB: true}, // column bands read A in place at any K
	}
	for _, k := range testGemmKernels() {
		for _, p := range ps {
			if k == gemmKernelGo && p.M*p.N*p.K > 1<<24 {
				continue // the portable tile is slow; the small cases take its paths
			}
			g := newGemmCase(r, p)
			one := g.run(k, 1)
			for _, w := range []int{2, 3, 4} {
				got := g.run(k, w)
				for i := range one {
					if math.Float32bits(got[i]) != math.Float32bits(one[i]) {
						t.Fatalf("%s %+v: %d workers: element %d = %g, 1 worker gave %g", k.name, p, w, i, got[i], one[i])
					}
				}
			}
		}
	}
}

// TestSgemmInPlaceBBitwise checks that reading B in place (tileRowAB, gemmDirectB) gives
// the bits of the same product with B packed: each element is the same chain of fused
// multiply-adds. Shapes with N a multiple of the kernel's nr, M's last panel of 0, 4 or
// 8 rows, several kc blocks, one and two goroutines, and (as a control) shapes that keep
// packing B.
func TestSgemmInPlaceBBitwise(t *testing.T) {
	r := rand.New(rand.NewPCG(10, 9))
	ps := []struct {
		p      MatMulParams
		direct bool // B read in place (for the 12×32 kernel)
	}{
		{MatMulParams{Batch: 1, M: 256, N: 768, K: 1000}, true}, // a Linear's dx: 21 panels and 4 rows
		{MatMulParams{Batch: 1, M: 104, N: 96, K: 385, Accumulate: true}, true},
		{MatMulParams{Batch: 1, M: 24, N: 1024, K: 800}, true},                  // C's rows padded
		{MatMulParams{Batch: 1, M: 800, N: 64, K: 500, Accumulate: true}, true}, // row bands (W2's dx)
		{MatMulParams{Batch: 2, M: 36, N: 64, K: 50, StrideA: 36 * 50, StrideB: 50 * 64}, true},
		{MatMulParams{Batch: 1, M: 37, N: 64, K: 50}, false},  // a last panel of 1 row: packed
		{MatMulParams{Batch: 1, M: 48, N: 100, K: 50}, false}, // partial column tiles: packed
		{MatMulParams{Batch: 1, M: 48, N: 64, K: 50, TransB: true}, false},
	}
	for _, k := range simdGemmKernels {
		small := *k
		small.kc, small.mc, small.nc = 7, 2*k.mr+1, 2*k.nr+3
		for _, kern := range []*gemmKernel{k, &small} {
			packed := *kern
			packed.tileRowAB = nil
			for _, c := range ps {
				if kern.nr == 32 && gemmDirectB(kern, &c.p) != c.direct {
					t.Fatalf("%s %+v: gemmDirectB = %v, want %v", kern.name, c.p, !c.direct, c.direct)
				}
				g := newGemmCase(r, c.p)
				for _, w := range []int{1, 2} {
					want, got := g.run(&packed, w), g.run(kern, w)
					for i := range want {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							t.Fatalf("%s %+v: %d workers: element %d = %g, B packed gave %g", kern.name, c.p, w, i, got[i], want[i])
						}
					}
				}
			}
		}
	}
}

// TestMatMulGOMAXPROCS runs the public op at GOMAXPROCS 1 and 2 and wants the same bits.
func TestMatMulGOMAXPROCS(t *testing.T) {
	dev := NewCPU()
	r := rand.New(rand.NewPCG(10, 4))
	vals := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(r.NormFloat64())
		}
		return v
	}
	a := FromSlice(dev, vals(3*61*300), 3, 61, 300)
	b := FromSlice(dev, vals(300*517), 517, 300)
	q := FromSlice(dev, vals(4*4*64*64), 4, 4, 64, 64) // 16 heads: whole matrices per goroutine
	run := func() ([]float32, []float32) {
		return ToSlice[float32](MatMulT(a, b, false, true)), ToSlice[float32](MatMulT(q, q, false, true))
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	y1, s1 := run()
	runtime.GOMAXPROCS(2)
	y2, s2 := run()
	for i := range y1 {
		if math.Float32bits(y1[i]) != math.Float32bits(y2[i]) {
			t.Fatalf("linear: element %d: GOMAXPROCS 1 gave %g, 2 gave %g", i, y1[i], y2[i])
		}
	}
	for i := range s1 {
		if math.Float32bits(s1[i]) != math.Float32bits(s2[i]) {
			t.Fatalf("scores: element %d: GOMAXPROCS 1 gave %g, 2 gave %g", i, s1[i], s2[i])
		}
	}
}

// TestSgemmTileMatchesGo runs each assembly tile directly against the portable tile on
// random panels, both storing and accumulating.
func TestSgemmTileMatchesGo(t *testing.T) {
	r := rand.New(rand.NewPCG(10, 5))
	for _, k := range simdGemmKernels {
		for _, kc := range []int{1, 2, 3, 4, 5, 8, 17, 100} {
			for _, acc := range []int{0, 1} {
				a := make([]float32, kc*k.mr)
				b := make([]float32, kc*k.nr)
				ldc := k.nr + 3
				c := make([]float32, k.mr*ldc)
				for _, s := range [][]float32{a, b, c} {
					for i := range s {
						s[i] = float32(r.Float64()*2 - 1)
					}
				}
				want := append([]float32(nil), c...)
				gemmTileGo(k.mr, k.nr)(kc, &a[0], &b[0], &want[0], ldc, acc)
				got := append([]float32(nil), c...)
				k.tile(kc, &a[0], &b[0], &got[0], ldc, acc)
				if k.tileColA != nil { // the same panel with k steps lda apart, run in place
					lda := k.mr + 3
					cols := make([]float32, kc*lda)
					for kk := 0; kk < kc; kk++ {
						copy(cols[kk*lda:kk*lda+k.mr], a[kk*k.mr:(kk+1)*k.mr])
					}
					got2 := append([]float32(nil), c...)
					k.tileColA(kc, &cols[0], lda, &b[0], &got2[0], ldc, acc)
					for i := range got {
						if math.Float32bits(got2[i]) != math.Float32bits(got[i]) {
							t.Fatalf("%s kc=%d: in-place Aᵀ: element %d = %g, packed gave %g", k.name, kc, i, got2[i], got[i])
						}
					}
				}
				if k.tileRowA != nil { // the same panel stored as rows lda apart, run in place
					lda := kc + 5
					rows := make([]float32, k.mr*lda)
					for kk := 0; kk < kc; kk++ {
						for i := 0; i < k.mr; i++ {
							rows[i*lda+kk] = a[kk*k.mr+i]
						}
					}
					got2 := append([]float32(nil), c...)
					k.tileRowA(kc, &rows[0], lda, &b[0], &got2[0], ldc, acc)
					for i := range got {
						if math.Float32bits(got2[i]) != math.Float32bits(got[i]) {
							t.Fatalf("%s kc=%d: in-place A: element %d = %g, packed gave %g", k.name, kc, i, got2[i], got[i])
						}
					}
					if k.tileRowAB != nil { // and B's k steps ldb apart, in place too
						ldb := k.nr + 7
						brows := make([]float32, kc*ldb)
						for kk := 0; kk < kc; kk++ {
							copy(brows[kk*ldb:kk*ldb+k.nr], b[kk*k.nr:(kk+1)*k.nr])
						}
						got3 := append([]float32(nil), c...)
						k.tileRowAB(kc, &rows[0], lda, &brows[0], ldb, &got3[0], ldc, acc)
						for i := range got {
							if math.Float32bits(got3[i]) != math.Float32bits(got[i]) {
								t.Fatalf("%s kc=%d: in-place A and B: element %d = %g, packed gave %g", k.name, kc, i, got3[i], got[i])
							}
						}
					}
				}
				for i := range want {
					if i%ldc >= k.nr { // padding between rows must be untouched
						if got[i] != c[i] {
							t.Fatalf("%s kc=%d: wrote padding element %d", k.name, kc, i)
						}
						continue
					}
					if d := math.Abs(float64(got[i] - want[i])); d > float64(kc+2)*gemmU*2*float64(kc+1) {
						t.Fatalf("%s kc=%d acc=%d: element %d: got %g want %g", k.name, kc, acc, i, got[i], want[i])
					}
				}
			}
		}
	}
}

// TestSgemmEdgeTiles runs each edge kernel (a last panel of fewer rows) against its full
// kernel's tile on the same packed panel: each element is the same chain of fused
// multiply-adds, so the rows they share agree bit for bit, in place or packed.
func TestSgemmEdgeTiles(t *testing.T) {
	r := rand.New(rand.NewPCG(10, 6))
	for _, k := range simdGemmKernels {
		for _, e := range k.edges {
			for _, kc := range []int{1, 3, 4, 7, 64} {
				for _, acc := range []int{0, 1} {
					a := make([]float32, kc*k.mr)
					b := make([]float32, kc*k.nr)
					ldc := k.nr + 5
					c := make([]float32, k.mr*ldc)
					for _, s := range [][]float32{a, b, c} {
						for i := range s {
							s[i] = float32(r.Float64()*2 - 1)
						}
					}
					want := append([]float32(nil), c...)
					k.tile(kc, &a[0], &b[0], &want[0], ldc, acc)
					ldr, ldk, ldb := kc+3, e.mr+3, k.nr+9
					rows := make([]float32, e.mr*ldr) // e.mr rows in place, ldr apart
					cols := make([]float32, kc*ldk)   // k steps in place, ldk apart
					brows := make([]float32, kc*ldb)  // B's k steps in place, ldb apart
					for kk := 0; kk < kc; kk++ {
						for i := 0; i < e.mr; i++ {
							rows[i*ldr+kk] = a[kk*k.mr+i]
							cols[kk*ldk+i] = a[kk*k.mr+i]
						}
						copy(brows[kk*ldb:kk*ldb+k.nr], b[kk*k.nr:(kk+1)*k.nr])
					}
					for _, v := range []struct {
						name string
						run  func(c []float32)
					}{
						{"packed", func(c []float32) { e.tile(kc, &a[0], &b[0], &c[0], ldc, acc) }},
						{"rows in place", func(c []float32) { e.tileRowA(kc, &rows[0], ldr, &b[0], &c[0], ldc, acc) }},
						{"k steps in place", func(c []float32) { e.tileColA(kc, &cols[0], ldk, &b[0], &c[0], ldc, acc) }},
						{"rows and B in place", func(c []float32) {
							if e.tileRowAB != nil {
								e.tileRowAB(kc, &rows[0], ldr, &brows[0], ldb, &c[0], ldc, acc)
							} else { // the kernel has none: what the others compute
								e.tile(kc, &a[0], &b[0], &c[0], ldc, acc)
							}
						}},
					} {
						got := append([]float32(nil), c...)
						v.run(got)
						for i := range got {
							w := want[i]
							if i >= e.mr*ldc || i%ldc >= k.nr { // rows past the edge and padding untouched
								w = c[i]
							}
							if math.Float32bits(got[i]) != math.Float32bits(w) {
								t.Fatalf("%s %s kc=%d acc=%d: element %d = %g, want %g", e.name, v.name, kc, acc, i, got[i], w)
							}
						}
					}
				}
			}
		}
	}
}

// TestGemmParallel checks that every item runs once and that a panic in any goroutine
// reaches the caller.
func TestGemmParallel(t *testing.T) {
	for _, workers := range []int{1, 2, 3} {
		counts := make([]atomic.Int32, 37)
		gemmParallel(len(counts), workers, func(_ *gemmWorker, i int) { counts[i].Add(1) })
		for i := range counts {
			if n := counts[i].Load(); n != 1 {
				t.Fatalf("%d workers: item %d ran %d times", workers, i, n)
			}
		}
		func() {
			defer func() {
				if r := recover(); r != "item 5" {
					t.Fatalf("%d workers: recovered %v, want the panic of item 5", workers, r)
				}
			}()
			gemmParallel(9, workers, func(_ *gemmWorker, i int) {
				if i == 5 {
					panic("item 5")
				}
			})
		}()
	}
}
