package tensor

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestExpShiftAccuracy checks the exponentials of the cross-entropy loops (the assembly
// where the CPU has it, else the portable form) against math.Exp: within 2 float32 ulps
// of e^d, d = x − m rounded to float32, over the whole range a softmax sees (d ≤ 0, down
// to where e^d underflows through the subnormals to 0), and the edge cases.
func TestExpShiftAccuracy(t *testing.T) {
	var xs []float32
	for d := -110.0; d <= 1; d += 0.0037 {
		xs = append(xs, float32(d))
	}
	inf := float32(math.Inf(1))
	xs = append(xs, 0, -0.0, 88, 88.7, 89, 100, 1000, inf, -inf, float32(math.NaN()), 1e-30, -1e-30, -87.5, -103.9)
	got := make([]float32, len(xs))
	expShiftAffine(got, xs, 0, 1, 0)
	for i, d := range xs {
		want := float32(math.Exp(float64(d)))
		if !sameF32(got[i], want, 2) {
			t.Errorf("e^%g = %g, want %g", d, got[i], want)
		}
	}
	// The shift: d = x − m is rounded to float32 first.
	const m = 3.25
	expShiftAffine(got, xs, m, 1, 0)
	for i, x := range xs {
		if want := float32(math.Exp(float64(x - m))); !sameF32(got[i], want, 2) {
			t.Errorf("e^(%g−%g) = %g, want %g", x, m, got[i], want)
		}
	}
}

// TestExpShiftMatchesGo checks the assembly loops against the portable ones on every
// length up to 70 (the 32-, 16-element and masked tails) and on long rows: elementwise
// within 2 ulps (4 for the affine form, whose portable form rounds twice), sums within
// 3·2⁻²⁴ relative (the terms' ulps and the assembly's float32 pair sums).
func TestExpShiftMatchesGo(t *testing.T) {
	if !hasVMathAVX512 {
		t.Skip("needs AVX-512")
	}
	r := rand.New(rand.NewPCG(7, 11))
	lens := []int{1000, 4096, 4099}
	for n := 0; n <= 70; n++ {
		lens = append(lens, n)
	}
	for _, n := range lens {
		x := vmathInputs(r, n, 30)
		got, want := make([]float32, n), make([]float32, n)
		expShiftAffineF32AVX512(got, x, 2.5, 0.75, -0.125)
		expShiftAffineGo(want, x, 2.5, 0.75, -0.125)
		for i := range want {
			if !sameF32(got[i], want[i], 4) && math.Abs(float64(got[i]-want[i])) > 1e-7 {
				t.Fatalf("expShiftAffine n=%d: element %d (x=%g): got %g want %g", n, i, x[i], got[i], want[i])
			}
		}
		xf := make([]float32, n) // finite sums: x ≤ m, as in a softmax
		for i := range xf {
			xf[i] = float32(-r.Float64() * 25)
		}
		if n > 2 {
			xf[n/2] = float32(math.Inf(-1)) // contributes 0
		}
		gs, ws := expShiftSumF32AVX512(xf, -0.5), expShiftSumGo(xf, -0.5)
		if math.Abs(gs-ws) > 3*0x1p-24*ws {
			t.Fatalf("expShiftSum n=%d: got %.17g want %.17g", n, gs, ws)
		}
	}
}
