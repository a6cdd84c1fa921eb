package tensor

import "math"

// Float32 loops over rows with float64 internals, used by the CPU kernels' F32 paths
// (GeLU, softmax, LayerNorm, cross entropy, binary ops). Each has a portable Go form,
// which states its result, and on amd64 with AVX-512 an assembly form (vmath_amd64.s)
// that computes the same formula over 8 lanes, with its own float64 exp (relative error
// ≲ 2e-16, where math.Exp's is ≲ 1e-16) and sums in a fixed lane order: the two differ
// by float64 rounding, far below the float32 rounding of the outputs (elementwise forms
// without exp agree bitwise). Most assembly forms do whole vectors and leave a tail to the
// Go form; callers split work across goroutines by rows or at multiples of vmathBlock, so
// which form computes an element depends only on the CPU, never on GOMAXPROCS.

// expSum returns Σ e^(scale·x+shift) over xs, accumulated in float64.
func expSum(xs []float32, scale, shift float64) float64 {
	if hasVMathAVX512 {
		return expSumF32AVX512(xs, scale, shift)
	}
	return expSumGo(xs, scale, shift)
}

func expSumGo(xs []float32, scale, shift float64) float64 {
	var s float64
	for _, x := range xs {
		s += math.Exp(scale*float64(x) + shift)
	}
	return s
}

// expAffine sets dst[i] = float32(alpha·e^(scale·src[i]+shift) + beta).
func expAffine(dst, src []float32, alpha, scale, shift, beta float64) {
	src = src[:len(dst)]
	if hasVMathAVX512 {
		expAffineSumF32AVX512(dst, src, alpha, scale, shift, beta) // the sum is not needed
		return
	}
	expAffineGo(dst, src, alpha, scale, shift, beta)
}

func expAffineGo(dst, src []float32, alpha, scale, shift, beta float64) {
	src = src[:len(dst)]
	for i, x := range src {
		dst[i] = float32(alpha*math.Exp(scale*float64(x)+shift) + beta)
	}
}

// geluTanh sets dst[i] to the tanh GeLU of src[i], 0.5x(1+tanh u) with
// u = √(2/π)(x+0.044715x³), computed as x/(1+e^(−2u)), which has no cancellation for
// negative x.
func geluTanh(dst, src []float32) {
	src = src[:len(dst)]
	n := 0
	if hasVMathAVX512 {
		n = len(dst) &^ 7
		geluTanhF32AVX512(dst[:n], src[:n])
	}
	geluTanhGo(dst[n:], src[n:])
}

func geluTanhGo(dst, src []float32) {
	src = src[:len(dst)]
	for i, v := range src {
		x := float64(v)
		dst[i] = float32(x / (1 + math.Exp(-2*sqrt2OverPi*(x*(0.044715*x*x+1)))))
	}
}

// geluTanhBackward sets dx[i] = dy[i]·GeLU'(x[i]). With s = 1/(1+e^(−2u)) = (1+tanh u)/2,
// GeLU' = s + 2x·s(1−s)·u', u' = √(2/π)(1+3·0.044715x²).
func geluTanhBackward(dx, x, dy []float32) {
	x, dy = x[:len(dx)], dy[:len(dx)]
	n := 0
	if hasVMathAVX512 {
		n = len(dx) &^ 7
		geluTanhBackwardF32AVX512(dx[:n], x[:n], dy[:n])
	}
	geluTanhBackwardGo(dx[n:], x[n:], dy[n:])
}

func geluTanhBackwardGo(dx, x, dy []float32) {
	x, dy = x[:len(dx)], dy[:len(dx)]
	for i, v := range x {
		xv := float64(v)
		x2 := xv * xv
		s := 1 / (1 + math.Exp(-2*sqrt2OverPi*(xv*(0.044715*x2+1))))
		du := sqrt2OverPi * (1 + 3*0.044715*x2)
		dx[i] = float32(float64(dy[i]) * (2*(xv*(s-s*s))*du + s))
	}
}

// geluTanhBias sets dst[i] = GeLU(float32(src[i]+bias[i])), as geluTanh of the float32
// sum; dst may be src.
func geluTanhBias(dst, src, bias []float32) {
	src, bias = src[:len(dst)], bias[:len(dst)]
	n := 0
	if hasVMathAVX512 {
		n = len(dst) &^ 7
		geluTanhBiasF32AVX512(dst[:n], src[:n], bias[:n])
	}
	binaryRow(OpAdd, dst[n:], src[n:], bias[n:], 1, 1)
	geluTanhGo(dst[n:], dst[n:])
}

// geluTanhBiasBackward sets dx[i] = dy[i]·GeLU'(float32(x[i]+bias[i])); dx may be x.
func geluTanhBiasBackward(dx, x, bias, dy []float32) {
	x, bias, dy = x[:len(dx)], bias[:len(dx)], dy[:len(dx)]
	n := 0
	if hasVMathAVX512 {
		n = len(dx) &^ 7
		geluTanhBiasBackwardF32AVX512(dx[:n], x[:n], bias[:n], dy[:n])
	}
	for i := n; i < len(dx); i++ {
		h := [1]float32{x[i] + bias[i]}
		geluTanhBackwardGo(dx[i:i+1], h[:], dy[i:i+1])
	}
}

// maxSum returns the largest element of xs (NaN if any is NaN; −Inf for none) and their
// float64 sum.
func maxSum(xs []float32) (float64, float64) {
	n, m, s := 0, math.Inf(-1), 0.0
	if hasVMathAVX512 {
		n = len(xs) &^ 15
		var m32 float32
		m32, s = maxSumF32AVX512(xs[:n])
		m = float64(m32)
		if math.IsNaN(s) { // a NaN or opposite infinities: let the Go loop decide
			n, m, s = 0, math.Inf(-1), 0
		}
	}
	m2, s2 := maxSumGo(xs[n:])
	return max(m, m2), s + s2
}

func maxSumGo(xs []float32) (float64, float64) {
	m, s := math.Inf(-1), 0.0
	for _, x := range xs {
		m = max(m, float64(x))
		s += float64(x)
	}
	return m, s
}

// vmathBlock is the alignment of the pieces parallelBlocks hands out: a multiple of every
// assembly loop's step, so which elements the assembly (rather than the portable tail)
// computes does not depend on the number of goroutines.
const vmathBlock = 16

// parallelBlocks is parallelFor over [0, n) with chunk boundaries at multiples of
// vmathBlock.
func parallelBlocks(n, grain int, body func(lo, hi int)) {
	parallelFor((n+vmathBlock-1)/vmathBlock, max(1, grain/vmathBlock), func(lo, hi int) {
		body(lo*vmathBlock, min(hi*vmathBlock, n))
	})
}

// sqDevSum returns Σ (x−mu)² over xs in float64.
func sqDevSum(xs []float32, mu float64) float64 {
	n, s := 0, 0.0
	if hasVMathAVX512 {
		n = len(xs) &^ 7
		s = sqDevSumF32AVX512(xs[:n], mu)
	}
	for _, v := range xs[n:] {
		d := float64(v) - mu
		s += d * d
	}
	return s
}

// normRow sets y[i] = float32(((x[i]−mu)·rs)·w[i] + b[i]): a LayerNorm (or, with mu 0,
// RMSNorm) row.
func normRow(y, x, w, b []float32, mu, rs float64) {
	x, w, b = x[:len(y)], w[:len(y)], b[:len(y)]
	n := 0
	if hasVMathAVX512 {
		n = len(y) &^ 7
		normRowF32AVX512(y[:n], x[:n], w[:n], b[:n], mu, rs)
	}
	for i := n; i < len(y); i++ {
		y[i] = float32(math.FMA((float64(x[i])-mu)*rs, float64(w[i]), float64(b[i])))
	}
}

// normBwdSums returns Σ g and Σ g·xhat over a row, with g = dy·w and xhat = (x−mu)·rs.
func normBwdSums(dy, x, w []float32, mu, rs float64) (sg, sgx float64) {
	x, w = x[:len(dy)], w[:len(dy)]
	n := 0
	if hasVMathAVX512 {
		n = len(dy) &^ 7
		sg, sgx = normBwdSumsF32AVX512(dy[:n], x[:n], w[:n], mu, rs)
	}
	for i := n; i < len(dy); i++ {
		g := float64(dy[i]) * float64(w[i])
		sg += g
		sgx += g * ((float64(x[i]) - mu) * rs)
	}
	return sg, sgx
}

// normBwdRow sets dx[i] = float32(rs·(g − sg − xhat·sgx)), g and xhat as in normBwdSums.
func normBwdRow(dx, dy, x, w []float32, mu, rs, sg, sgx float64) {
	dy, x, w = dy[:len(dx)], x[:len(dx)], w[:len(dx)]
	n := 0
	if hasVMathAVX512 {
		n = len(dx) &^ 7
		normBwdRowF32AVX512(dx[:n], dy[:n], x[:n], w[:n], mu, rs, sg, sgx)
	}
	for i := n; i < len(dx); i++ {
		g := float64(dy[i]) * float64(w[i])
		xh := (float64(x[i]) - mu) * rs
		dx[i] = float32(rs * math.FMA(-xh, sgx, g-sg))
	}
}

// normBwdCols adds dy[j]·xhat[j] into sw[j] (one fused multiply-add) and dy[j] into sb[j].
// Each column's result is the same whichever of the assembly and the tail computes it.
func normBwdCols(sw, sb []float64, dy, x []float32, mu, rs float64) {
	sb, dy, x = sb[:len(sw)], dy[:len(sw)], x[:len(sw)]
	n := 0
	if hasVMathAVX512 {
		n = len(sw) &^ 7
		normBwdColsF32AVX512(sw[:n], sb[:n], dy[:n], x[:n], mu, rs)
	}
	for j := n; j < len(sw); j++ {
		g := float64(dy[j])
		sw[j] = math.FMA(g, (float64(x[j])-mu)*rs, sw[j])
		sb[j] += g
	}
}

// addCols adds row into acc elementwise in float64 (one rounding per element, the same
// whichever of the assembly and the tail computes it).
func addCols(acc []float64, row []float32) {
	row = row[:len(acc)]
	n := 0
	if hasVMathAVX512 {
		n = len(acc) &^ 7
		addColsF32AVX512(acc[:n], row[:n])
	}
	for j := n; j < len(acc); j++ {
		acc[j] += float64(row[j])
	}
}

// dot returns Σ a[i]·b[i] in float64.
func dot(a, b []float32) float64 {
	b = b[:len(a)]
	n, s := 0, 0.0
	if hasVMathAVX512 {
		n = len(a) &^ 7
		s = dotF32AVX512(a[:n], b[:n])
	}
	for i := n; i < len(a); i++ {
		s += float64(a[i]) * float64(b[i])
	}
	return s
}

// softmaxBwdRow sets dx[i] = float32((scale·y[i])·(dy[i]−s)), softmax's backward for a
// row whose Σ dy·y is s.
func softmaxBwdRow(dx, y, dy []float32, scale, s float64) {
	y, dy = y[:len(dx)], dy[:len(dx)]
	n := 0
	if hasVMathAVX512 {
		n = len(dx) &^ 7
		softmaxBwdRowF32AVX512(dx[:n], y[:n], dy[:n], scale, s)
	}
	for i := n; i < len(dx); i++ {
		dx[i] = float32(scale * float64(y[i]) * (float64(dy[i]) - s))
	}
}
