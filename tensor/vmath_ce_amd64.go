//go:build !purego

package tensor

//go:noescape
func expShiftSumF32AVX512(x []float32, m float32) float64

//go:noescape
func expShiftAffineF32AVX512(dst, x []float32, m, a, b float32)
