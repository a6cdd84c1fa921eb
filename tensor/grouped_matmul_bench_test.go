package tensor

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkGroupedMatMul measures GroupedMatMul at W4's MoE shapes (issue 22: W2's 2048
// tokens routed top-2 to 8 experts, 4096 rows; C 256, expert hidden 512), the up
// projection (4096×256 by 8 of 256×512) and the down projection (4096×512 by 8 of
// 512×256), with counts uniform (512 each) and skewed, beside "dense": one SGEMM of the
// same FLOPs (4096×K by one K×N). Each reports GFLOP/s; the grouped kernel's target is at
// least 0.8 times dense's, compared within one run:
//
//	python3 /work/notes/quiet.py go test ./tensor -run '^$' -bench GroupedMatMul -count 5
func BenchmarkGroupedMatMul(b *testing.B) {
	const T, C, F = 4096, 256, 512
	counts := map[string][]int{
		"uniform": {512, 512, 512, 512, 512, 512, 512, 512},
		"skewed":  {1400, 900, 600, 450, 300, 250, 150, 46},
	}
	for _, proj := range []struct {
		name string
		k, n int
	}{{"up", C, F}, {"down", F, C}} {
		r := rand.New(rand.NewPCG(1, 2))
		x := benchSpan(r, T, proj.k)
		w := benchSpan(r, 8, proj.k, proj.n)
		dst := benchSpan(r, T, proj.n)
		flops := 2 * float64(T) * float64(proj.k) * float64(proj.n)
		report := func(b *testing.B) {
			b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		}
		b.Run(proj.name+"/dense", func(b *testing.B) {
			p := MatMulParams{Batch: 1, M: T, N: proj.n, K: proj.k}
			for b.Loop() {
				cpuBackend{}.MatMul(dst, x, sub(w, 0, proj.k, proj.n), p)
			}
			report(b)
		})
		for _, name := range []string{"uniform", "skewed"} {
			p := GroupedMatMulParams{Counts: counts[name], K: proj.k, N: proj.n}
			b.Run(proj.name+"/"+name, func(b *testing.B) {
				for b.Loop() {
					cpuBackend{}.GroupedMatMul(dst, x, w, p)
				}
				report(b)
			})
		}
	}
}
