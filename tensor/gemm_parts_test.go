package tensor

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestSgemmTileParts runs each kernel's tilePart over a tile's k steps in several parts
// against its tileRowA over all of them at once: the accumulators carried through memory
// between parts leave every element the same chain of fused multiply-adds, bit for bit.
func TestSgemmTileParts(t *testing.T) {
	r := rand.New(rand.NewPCG(10, 7))
	for _, k := range simdGemmKernels {
		for _, e := range append([]*gemmKernel{k}, k.edges...) {
			if e.tilePart == nil {
				continue
			}
			for _, parts := range [][]int{{1}, {5}, {1, 1}, {4, 7, 1}, {64, 64, 36}} {
				for _, acc := range []int{0, 1} {
					kc := 0
					for _, p := range parts {
						kc += p
					}
					lda, ldc := kc+5, e.nr+3
					a := make([]float32, e.mr*lda) // e.mr rows in place, lda apart
					b := make([]float32, kc*e.nr)
					c := make([]float32, e.mr*ldc)
					for _, s := range [][]float32{a, b, c} {
						for i := range s {
							s[i] = float32(r.Float64()*2 - 1)
						}
					}
					want := append([]float32(nil), c...)
					e.tileRowA(kc, &a[0], lda, &b[0], &want[0], ldc, acc)
					got := append([]float32(nil), c...)
					spill := make([]float32, e.mr*e.nr)
					for i, k0 := 0, 0; i < len(parts); k0, i = k0+parts[i], i+1 {
						part := 0
						if i > 0 {
							part |= 1
						}
						if i < len(parts)-1 {
							part |= 2
						}
						e.tilePart(parts[i], &a[k0], lda, &b[k0*e.nr], &got[0], ldc, acc, &b[0], &spill[0], part)
					}
					for i := range got {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							t.Fatalf("%s parts %v acc=%d: element %d = %g, whole tile %g", e.name, parts, acc, i, got[i], want[i])
						}
					}
				}
			}
		}
	}
}
