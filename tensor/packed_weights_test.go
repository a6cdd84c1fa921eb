package tensor

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestPackedWeightsMatMulT: x·wᵀ with w packed once equals MatMulT bit for bit, for row
// counts across the kernels' edge panels, N not a multiple of nr, K across kc blocks,
// and again when the packing is reused.
func TestPackedWeightsMatMulT(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	dev := NewCPU()
	fill := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(r.Float64()*2 - 1)
		}
		return v
	}
	pw := NewPackedWeights()
	for _, nk := range [][2]int{{300, 100}, {77, 800}, {1024, 400}} {
		w := FromSlice(dev, fill(nk[0]*nk[1]), nk[0], nk[1])
		for _, m := range []int{1, 5, 12, 13, 24, 28, 32, 130} {
			t.Run(fmt.Sprintf("%dx%dx%d", m, nk[1], nk[0]), func(t *testing.T) {
				x := FromSlice(dev, fill(m*nk[1]), 1, m, nk[1])
				var got, want []float32
				dev.NoGrad(func() {
					got = ToSlice[float32](pw.MatMulT(x, w))
					want = ToSlice[float32](MatMulT(x, w, false, true))
				})
				for i := range want {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("element %d = %g, MatMulT's %g", i, got[i], want[i])
					}
				}
			})
		}
	}
	packed := 3 // one per w
	if defaultGemmKernel() == nil {
		packed = 0 // no SIMD GEMM kernel (purego): MatMulT itself, nothing packed
	}
	if len(pw.m) != packed {
		t.Errorf("%d packed weights, want %d", len(pw.m), packed)
	}
}
