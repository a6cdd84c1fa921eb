package tensor

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestGroupedMatMulFallbackMatches: the per-expert fallback other backends get
// (groupedMatMulEach) gives the CPU kernel's values bit for bit, on one goroutine and
// several.
func TestGroupedMatMulFallbackMatches(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, transB := range []bool{false, true} {
		p := GroupedMatMulParams{Counts: []int{70, 0, 3, 129, 1}, K: 300, N: 96, TransB: transB}
		x, w := benchSpan(r, 203, p.K), benchSpan(r, 5, p.K, p.N)
		want := benchSpan(r, 203, p.N)
		groupedMatMulEach(cpuBackend{}, want, x, w, p)
		kern := defaultGemmKernel()
		if kern == nil {
			t.Skip("no SIMD GEMM kernel on this CPU")
		}
		for _, workers := range []int{1, 2, 3} {
			got := make([]float32, 203*p.N)
			groupedSgemm(kern, got, raw[float32](x), raw[float32](w), p, workers)
			if !slices.Equal(got, raw[float32](want)) {
				t.Errorf("transB=%v workers %d: differs from per-expert MatMul", transB, workers)
			}
		}
	}
}
