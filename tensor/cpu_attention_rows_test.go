package tensor

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestAttentionRowsMatchGo checks the assembly behind rowMax and rowExpSum against their
// Go formulas at every length up to 40 (full vectors and masked tails): the maximum
// exactly, the rounded exponentials within one float32 rounding of float64 differences
// (≲ 2e-16 relative), the sums within float64 rounding.
func TestAttentionRowsMatchGo(t *testing.T) {
	if !hasVMathAVX512 {
		t.Skip("needs AVX-512")
	}
	r := rand.New(rand.NewPCG(3, 4))
	for n := 0; n <= 40; n++ {
		src := make([]float32, n+1) // one element past the row must not be read or written
		for i := range src {
			src[i] = float32(8*r.Float64() - 4)
		}
		row := src[:n]
		want := math.Inf(-1)
		for _, x := range row {
			want = max(want, float64(x))
		}
		if got := float64(maxF32AVX512(row)); got != want {
			t.Errorf("n=%d: max %v, want %v", n, got, want)
		}
		dst := make([]float32, n+1)
		dst[n] = 7
		sum := expAffineSumF32AVX512(dst[:n], row, 1, 0.7, -1.5, 0)
		var wantSum float64
		for i, x := range row {
			e := math.Exp(0.7*float64(x) - 1.5)
			wantSum += e
			if math.Abs(float64(dst[i])-e) > 1e-7*e {
				t.Errorf("n=%d: exp[%d] = %v, want %v", n, i, dst[i], e)
			}
		}
		if math.Abs(sum-wantSum) > 1e-14*wantSum || dst[n] != 7 {
			t.Errorf("n=%d: sum %v, want %v (guard %v)", n, sum, wantSum, dst[n])
		}
	}
}
