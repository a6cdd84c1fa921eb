package tensor

import (
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
)

// vmathInputs returns n values: mostly in [-lo, lo], with the specials and the ends of
// exp's range mixed in.
func vmathInputs(r *rand.Rand, n int, lo float64) []float32 {
	specials := []float32{0, float32(math.Copysign(0, -1)), 1, -1, 1e-30, -1e-30, 88, -88, 104, -104, 200, -200,
		float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 3.4e38, -3.4e38}
	xs := make([]float32, n)
	for i := range xs {
		if r.IntN(8) == 0 {
			xs[i] = specials[r.IntN(len(specials))]
		} else {
			xs[i] = float32((r.Float64()*2 - 1) * lo)
		}
	}
	return xs
}

// sameF32 reports whether got is want or within ulps float32 ulps of it (NaN matches NaN).
func sameF32(got, want float32, ulps int) bool {
	if math.IsNaN(float64(got)) || math.IsNaN(float64(want)) {
		return math.IsNaN(float64(got)) && math.IsNaN(float64(want))
	}
	if got == want {
		return true
	}
	if math.IsInf(float64(got), 0) || math.IsInf(float64(want), 0) || (got < 0) != (want < 0) {
		return false
	}
	d := int64(math.Float32bits(got)) - int64(math.Float32bits(want))
	return d >= -int64(ulps) && d <= int64(ulps)
}

// TestVMathMatchesGo checks the assembly loops against the portable ones (the float32
// results may differ in the last bit, where float64 rounding crosses a float32 tie) on
// every length up to 40 (the tails) and on long rows.
func TestVMathMatchesGo(t *testing.T) {
	if !hasVMathAVX512 {
		t.Skip("needs AVX-512")
	}
	r := rand.New(rand.NewPCG(7, 1))
	lens := []int{1000, 4099}
	for n := 0; n <= 40; n++ {
		lens = append(lens, n)
	}
	for _, n := range lens {
		x := vmathInputs(r, n, 12)
		dy := vmathInputs(r, n, 2)
		got, want := make([]float32, n), make([]float32, n)
		check := func(name string) {
			t.Helper()
			for i := range want {
				if !sameF32(got[i], want[i], 1) {
					t.Fatalf("%s n=%d: element %d (x=%g): got %g want %g", name, n, i, x[i], got[i], want[i])
				}
			}
		}
		geluTanh(got, x)
		geluTanhGo(want, x)
		check("geluTanh")
		geluTanhBackward(got, x, dy)
		geluTanhBackwardGo(want, x, dy)
		check("geluTanhBackward")
		// The bias forms equal the unfused composition (a float32 add, then GeLU) bit for bit.
		bias, h := vmathInputs(r, n, 3), make([]float32, n)
		binaryRow(OpAdd, h, x, bias, 1, 1)
		geluTanh(want, h)
		geluTanhBias(got, x, bias)
		check("geluTanhBias")
		geluTanhBackward(want, h, dy)
		geluTanhBiasBackward(got, x, bias, dy)
		check("geluTanhBiasBackward")
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("geluTanhBiasBackward n=%d: element %d: got %g want %g bit for bit", n, i, got[i], want[i])
			}
		}
		geluTanhBias(got, x, bias)
		geluTanh(want, h)
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("geluTanhBias n=%d: element %d: got %g want %g bit for bit", n, i, got[i], want[i])
			}
		}
		expAffine(got, x, 0.75, -1.5, 0.25, -0.125)
		expAffineGo(want, x, 0.75, -1.5, 0.25, -0.125)
		check("expAffine")

		// Sums: finite inputs (an Inf or NaN anywhere makes both NaN or Inf).
		xf := make([]float32, n)
		for i := range xf {
			xf[i] = float32(r.Float64()*40 - 20)
		}
		gs, ws := expSum(xf, 0.5, -3), expSumGo(xf, 0.5, -3)
		if math.Abs(gs-ws) > 1e-14*ws {
			t.Fatalf("expSum n=%d: got %.17g want %.17g", n, gs, ws)
		}
		gm, gsum := maxSum(xf)
		wm, wsum := maxSumGo(xf)
		if gm != wm || math.Abs(gsum-wsum) > 1e-13*float64(n+1)*20 {
			t.Fatalf("maxSum n=%d: got %g, %.17g want %g, %.17g", n, gm, gsum, wm, wsum)
		}
		if n > 3 { // a NaN anywhere wins
			xf[n/2] = float32(math.NaN())
			if gm, _ := maxSum(xf); !math.IsNaN(gm) {
				t.Fatalf("maxSum n=%d with a NaN: got %g", n, gm)
			}
		}
	}
}

// TestVMathAccuracy checks the portable formulas (and through TestVMathMatchesGo the
// assembly) against float64 references: within one float32 ulp of the exact value.
func TestVMathAccuracy(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 2))
	x := vmathInputs(r, 3000, 8)
	dy := vmathInputs(r, 3000, 2)
	got := make([]float32, len(x))
	geluTanh(got, x)
	for i, v := range x {
		xv := float64(v)
		u := sqrt2OverPi * (xv + 0.044715*xv*xv*xv)
		want := float32(0.5 * xv * (1 + math.Tanh(u)))
		if u < -2 { // 1+tanh u cancels: use 1+tanh u = 2e^(2u)/(1+e^(2u))
			want = float32(xv * math.Exp(2*u) / (1 + math.Exp(2*u)))
		}
		if math.Abs(xv) < 1e30 && !sameF32(got[i], want, 1) {
			t.Fatalf("geluTanh(%g) = %g, want %g", v, got[i], want)
		}
	}
	geluTanhBackward(got, x, dy)
	for i, v := range x {
		xv := float64(v)
		th := math.Tanh(sqrt2OverPi * (xv + 0.044715*xv*xv*xv))
		g := 0.5*(1+th) + 0.5*xv*(1-th*th)*sqrt2OverPi*(1+3*0.044715*xv*xv)
		want := float32(float64(dy[i]) * g)
		if math.Abs(xv) < 3 && !sameF32(got[i], want, 2) { // beyond, 1±tanh cancels in the reference
			t.Fatalf("geluTanhBackward(%g, dy=%g) = %g, want %g", v, dy[i], got[i], want)
		}
	}
	expAffine(got, x, 1, 1, 0, 0)
	for i, v := range x {
		if want := float32(math.Exp(float64(v))); !sameF32(got[i], want, 1) {
			t.Fatalf("exp(%g) = %g, want %g", v, got[i], want)
		}
	}
}

// TestVMathNormMatchesGo checks the LayerNorm and softmax-backward row loops against their formulas written
// out in Go: bitwise for the elementwise ones (the tails use the same fused operations),
// within float64 rounding for the sums.
func TestVMathNormMatchesGo(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 3))
	for _, n := range []int{0, 1, 5, 7, 8, 9, 15, 16, 17, 31, 40, 1001} {
		x, dy, w, b := vmathInputs(r, n, 3), vmathInputs(r, n, 2), vmathInputs(r, n, 1.5), vmathInputs(r, n, 1)
		for i := range x { // finite values: sums of Inf and NaN are compared elsewhere
			for _, s := range [][]float32{x, dy, w, b} {
				if math.IsInf(float64(s[i]), 0) || math.IsNaN(float64(s[i])) || math.Abs(float64(s[i])) > 1e6 {
					s[i] = 0.5
				}
			}
		}
		const mu, rs, sg, sgx = 0.25, 1.75, -0.125, 0.375
		got, want := make([]float32, n), make([]float32, n)
		normRow(got, x, w, b, mu, rs)
		for i := range want {
			want[i] = float32(math.FMA((float64(x[i])-mu)*rs, float64(w[i]), float64(b[i])))
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("normRow n=%d: element %d = %g, want %g", n, i, got[i], want[i])
			}
		}
		normBwdRow(got, dy, x, w, mu, rs, sg, sgx)
		for i := range want {
			g := float64(dy[i]) * float64(w[i])
			want[i] = float32(rs * math.FMA(-((float64(x[i])-mu)*rs), sgx, g-sg))
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("normBwdRow n=%d: element %d = %g, want %g", n, i, got[i], want[i])
			}
		}
		sw, sb := make([]float64, n), make([]float64, n)
		ww, wb := make([]float64, n), make([]float64, n)
		for rep := 0; rep < 3; rep++ {
			normBwdCols(sw, sb, dy, x, mu, rs)
			for j := range ww {
				ww[j] = math.FMA(float64(dy[j]), (float64(x[j])-mu)*rs, ww[j])
				wb[j] += float64(dy[j])
			}
		}
		for j := range ww {
			if sw[j] != ww[j] || sb[j] != wb[j] {
				t.Fatalf("normBwdCols n=%d: column %d = %g, %g want %g, %g", n, j, sw[j], sb[j], ww[j], wb[j])
			}
		}
		ac, wc := make([]float64, n), make([]float64, n)
		for _, row := range [][]float32{x, dy, w} {
			addCols(ac, row)
			for j := range wc {
				wc[j] += float64(row[j])
			}
		}
		for j := range wc {
			if ac[j] != wc[j] {
				t.Fatalf("addCols n=%d: column %d = %g want %g", n, j, ac[j], wc[j])
			}
		}
		softmaxBwdRow(got, x, dy, 0.125, sg)
		for i := range want {
			want[i] = float32(0.125 * float64(x[i]) * (float64(dy[i]) - sg))
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("softmaxBwdRow n=%d: element %d = %g, want %g", n, i, got[i], want[i])
			}
		}
		var wdot, sdot float64
		for i := range x {
			wdot += float64(x[i]) * float64(dy[i])
			sdot += math.Abs(float64(x[i]) * float64(dy[i]))
		}
		if d := dot(x, dy); math.Abs(d-wdot) > 1e-13*sdot {
			t.Fatalf("dot n=%d: got %g want %g", n, d, wdot)
		}
		var wsq, wg, wgx, scale float64
		for i := range x {
			d := float64(x[i]) - mu
			wsq += d * d
			g := float64(dy[i]) * float64(w[i])
			wg += g
			wgx += g * (d * rs)
			scale += math.Abs(g) * (math.Abs(d*rs) + 1)
		}
		gg, ggx := normBwdSums(dy, x, w, mu, rs)
		if sq := sqDevSum(x, mu); math.Abs(sq-wsq) > 1e-13*wsq ||
			math.Abs(gg-wg) > 1e-13*scale || math.Abs(ggx-wgx) > 1e-13*scale {
			t.Fatalf("sums n=%d: got %g, %g, %g want %g, %g, %g", n, sq, gg, ggx, wsq, wg, wgx)
		}
	}
}

// TestF32KernelsGOMAXPROCS runs the vectorised float32 kernels on odd sizes (so chunks
// and tails fall everywhere) at GOMAXPROCS 1, 2 and 3 and wants the same bits.
func TestF32KernelsGOMAXPROCS(t *testing.T) {
	be := cpuBackend{}
	r := rand.New(rand.NewPCG(7, 4))
	rows, c := 67, 1001
	x, y, dy, dx := benchSpan(r, rows, c), benchSpan(r, rows, c), benchSpan(r, rows, c), benchSpan(r, rows, c)
	w, b, dw, db := benchSpan(r, c), benchSpan(r, c), benchSpan(r, c), benchSpan(r, c)
	mean, rstd := benchSpan(r, rows), benchSpan(r, rows)
	loss, lse, dloss := benchSpan(r, rows), benchSpan(r, rows), benchSpan(r, rows)
	tgt := benchIDs(r, rows, c)
	sp := SoftmaxParams{Scale: 0.3, Causal: true}
	outputs := []Span{y, dx, dw, db, mean, rstd, loss, lse}
	run := func() [][]float32 {
		var res [][]float32
		for _, s := range outputs {
			clear(raw[float32](s))
		}
		snap := func() {
			for _, s := range outputs {
				res = append(res, append([]float32(nil), raw[float32](s)...))
			}
		}
		be.Unary(OpGeLUTanh, y, x, 0)
		be.UnaryBackward(OpGeLUTanh, dx, x, y, dy, 0)
		snap()
		be.LayerNorm(y, mean, rstd, x, w, b, 1e-5)
		be.LayerNormBackward(dx, dw, db, dy, x, w, mean, rstd)
		snap()
		be.Softmax(y, x, Span{}, sp)
		be.SoftmaxBackward(dx, y, dy, sp)
		snap()
		be.CrossEntropy(loss, lse, x, tgt, CrossEntropyParams{LabelSmoothing: 0.1})
		be.CrossEntropyBackward(dx, x, tgt, lse, dloss, CrossEntropyParams{LabelSmoothing: 0.1})
		snap()
		return res
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	want := run()
	for _, procs := range []int{2, 3} {
		runtime.GOMAXPROCS(procs)
		got := run()
		for i := range want {
			for j := range want[i] {
				if math.Float32bits(got[i][j]) != math.Float32bits(want[i][j]) {
					t.Fatalf("GOMAXPROCS %d: output %d element %d = %g, GOMAXPROCS 1 gave %g", procs, i, j, got[i][j], want[i][j])
				}
			}
		}
	}
}

// TestBinaryRowF32 checks binaryRow's assembly path bitwise against Go's float32
// arithmetic, for b streamed and broadcast, and in place.
func TestBinaryRowF32(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 5))
	ops := map[BinaryOp]func(x, y float32) float32{
		OpAdd: func(x, y float32) float32 { return x + y },
		OpSub: func(x, y float32) float32 { return x - y },
		OpMul: func(x, y float32) float32 { return x * y },
		OpDiv: func(x, y float32) float32 { return x / y },
	}
	for _, n := range []int{0, 1, 15, 16, 17, 33, 40, 1001} {
		a, b := vmathInputs(r, n, 4), vmathInputs(r, n+1, 4)
		for op, f := range ops {
			for _, sb := range []int{0, 1} {
				got := make([]float32, n)
				binaryRow(op, got, a, b, 1, sb)
				inPlace := append([]float32(nil), a...)
				binaryRow(op, inPlace, inPlace, b, 1, sb)
				for i := range got {
					want := f(a[i], b[i*sb])
					if !sameF32(got[i], want, 0) || !sameF32(inPlace[i], want, 0) {
						t.Fatalf("op %d sb=%d n=%d: element %d = %g (in place %g), want %g", op, sb, n, i, got[i], inPlace[i], want)
					}
				}
			}
		}
	}
}
