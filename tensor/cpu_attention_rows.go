package tensor

import "math"

// Row operations of the attention kernels in either compute type: float32 rows go through
// the vectorised loops of vmath.go, float64 rows through the same formulas in Go.

// rowMax returns the largest element of x (−∞ for none). A NaN element may be ignored:
// it reaches the row's result through its exponential.
func rowMax[T float](x []T) float64 {
	if x32, ok := any(x).([]float32); ok && hasVMathAVX512 {
		return float64(maxF32AVX512(x32))
	}
	m := math.Inf(-1)
	for _, v := range x {
		m = max(m, float64(v))
	}
	return m
}

// rowExpSum sets dst[j] = e^(scale·src[j] + shift), computed in float64, and returns the
// float64 sum of the exponentials before rounding.
func rowExpSum[T float](dst, src []T, scale, shift float64) float64 {
	src = src[:len(dst)]
	if d32, ok := any(dst).([]float32); ok && hasVMathAVX512 {
		return expAffineSumF32AVX512(d32, any(src).([]float32), 1, scale, shift, 0)
	}
	var s float64
	for j, v := range src {
		e := math.Exp(scale*float64(v) + shift)
		dst[j] = T(e)
		s += e
	}
	return s
}

// scaleRow multiplies x by alpha (rounded to T), vectorised by binaryRow.
func scaleRow[T float](x []T, alpha float64) {
	a := [1]T{T(alpha)}
	binaryRow(OpMul, x, x, a[:], 1, 0)
}

// rowDot returns Σ a·b in float64.
func rowDot[T float](a, b []T) float64 {
	if a32, ok := any(a).([]float32); ok {
		return dot(a32, any(b).([]float32))
	}
	var s float64
	for j, v := range a {
		s += float64(v) * float64(b[j])
	}
	return s
}

// softmaxBwdRowT sets dx[j] = (scale·y[j])·(dy[j] − s), softmax's backward for a row whose
// Σ dy·y is s; dx may be dy.
func softmaxBwdRowT[T float](dx, y, dy []T, scale, s float64) {
	if dx32, ok := any(dx).([]float32); ok {
		softmaxBwdRow(dx32, any(y).([]float32), any(dy).([]float32), scale, s)
		return
	}
	for j, v := range y[:len(dx)] {
		dx[j] = T(scale * float64(v) * (float64(dy[j]) - s))
	}
}
