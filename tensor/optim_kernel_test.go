package tensor

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The AVX-512 Adam loop gives the portable kernel's results bit for bit, at lengths with
// and without a tail, for Adam (l2) and AdamW (decay), with zero, tiny and huge values.
func TestAdamKernelMatchesPortable(t *testing.T) {
	if !hasVMathAVX512 {
		t.Skip("needs AVX-512 (the portable kernel is the only one here)")
	}
	r := rand.New(rand.NewPCG(3, 4))
	special := []float32{0, float32(math.Copysign(0, -1)), 1e-30, -1e-30, 1e30, -3e38, 1e-45}
	for _, n := range []int{16, 17, 31, 64, 1000} {
		for _, decoupled := range []bool{false, true} {
			k := adamConsts[float32]{scale: 0.5, decay: 1, b1: 0.9, c1: 1 - 0.9, b2: 0.999, c2: float32(1 - 0.999),
				stepSize: 1e-3 / 0.19, invBC2Sqrt: float32(1 / math.Sqrt(0.0199)), eps: 1e-8}
			if decoupled {
				k.decay = 1 - 1e-3*0.1
			} else {
				k.l2 = 0.01
			}
			p, g, m, v := make([]float32, n), make([]float32, n), make([]float32, n), make([]float32, n)
			for i := range n {
				p[i], g[i], m[i] = float32(r.NormFloat64()), float32(r.NormFloat64()*1e-2), float32(r.NormFloat64()*1e-3)
				v[i] = float32(r.ExpFloat64() * 1e-6)
				if i%7 == 3 {
					g[i] = special[i%len(special)]
				}
			}
			wantP, wantM, wantV := clone32(p), clone32(m), clone32(v)
			adamKernelGo(wantP, g, wantM, wantV, &k)
			adamKernel(p, g, m, v, &k)
			for i := range n {
				if math.Float32bits(p[i]) != math.Float32bits(wantP[i]) || math.Float32bits(m[i]) != math.Float32bits(wantM[i]) ||
					math.Float32bits(v[i]) != math.Float32bits(wantV[i]) {
					t.Fatalf("n=%d decoupled=%v element %d: (p, m, v) = (%g, %g, %g), portable (%g, %g, %g)",
						n, decoupled, i, p[i], m[i], v[i], wantP[i], wantM[i], wantV[i])
				}
			}
		}
	}
}

func clone32(x []float32) []float32 { return append([]float32(nil), x...) }

// The four-block AVX-512 sum of squares gives each block the scalar loop's sum bit for
// bit, at lengths with and without a tail, with values of very different sizes.
func TestSumSquares4MatchesScalar(t *testing.T) {
	if !hasVMathAVX512 {
		t.Skip("needs AVX-512 (the scalar loop is the only one here)")
	}
	r := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{0, 1, 3, 4, 7, 64, 1001, sumBlock} {
		var xs [4][]float32
		for j := range xs {
			xs[j] = make([]float32, n)
			for i := range n {
				xs[j][i] = float32(r.NormFloat64() * math.Pow(10, float64(r.IntN(20)-10)))
			}
		}
		got := make([]float64, 4)
		sumSquares4(got, xs)
		for j := range xs {
			if want := sumSquares(xs[j]); math.Float64bits(got[j]) != math.Float64bits(want) {
				t.Errorf("n=%d block %d: %v, scalar loop %v", n, j, got[j], want)
			}
		}
	}
}
