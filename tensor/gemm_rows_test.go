package tensor

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestSgemmRowsIndependentOfM: a row of C depends only on its row of A, not on how many
// rows the product has (full panels, edge kernels for a last partial panel, A packed or
// read in place, several K blocks), so a token's activations are the same alone and in
// any batch (the serving engine relies on it). Each kernel's M-row product must equal,
// bit for bit, the first M rows of its 41-row product.
func TestSgemmRowsIndependentOfM(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const full = 41
	for _, k := range testGemmKernels() {
		for _, s := range []struct{ n, k int }{{301, 1100}, {130, 37}} {
			for _, transB := range []bool{false, true} {
				p := MatMulParams{Batch: 1, M: full, N: s.n, K: s.k, TransB: transB}
				g := newGemmCase(r, p)
				want := g.run(k, 2)
				for _, m := range []int{1, 2, 3, 4, 5, 7, 8, 9, 12, 13, 17, 24, 31, 33, 40} {
					gm := g
					gm.p.M, gm.a, gm.c = m, g.a[:m*s.k], g.c[:m*s.n]
					got := gm.run(k, 1+m%2)
					if !slices.Equal(got, want[:m*s.n]) {
						t.Errorf("%s %s: the first %d rows differ from the %d-row product's", k.name,
							fmt.Sprintf("N %d K %d transB %v", s.n, s.k, transB), m, full)
					}
				}
			}
		}
	}
}
