package tensor

import "math"

// Float32 loops of the cross-entropy kernels (cpu_ce.go): exponentials of logits shifted
// by a row maximum, computed in float32. The portable Go forms state the result: each
// e^d, for d = x − m rounded to float32, is float32(math.Exp(d)), the correctly rounded
// value or its neighbour. On amd64 with AVX-512 the assembly forms (vmath_ce_amd64.s)
// take any length and use a float32 exp, 16 lanes at a time, within one ulp of the
// correctly rounded e^d over the softmax range in the tests (2 allowed): each element may
// differ from the portable form by an ulp or two, and which form computes an element
// depends only on the CPU.

// expShiftSum returns Σ e^(x[i]−m), each term rounded to float32 and the sum accumulated
// in float64 (lane-wise in the assembly form).
func expShiftSum(x []float32, m float32) float64 {
	if hasVMathAVX512 {
		return expShiftSumF32AVX512(x, m)
	}
	return expShiftSumGo(x, m)
}

func expShiftSumGo(x []float32, m float32) float64 {
	var s float64
	for _, v := range x {
		s += float64(float32(math.Exp(float64(v - m))))
	}
	return s
}

// expShiftAffine sets dst[i] = a·e^(x[i]−m) + b in float32, the product and sum rounded
// once (a fused multiply-add; the portable form rounds the float64 result, which can
// differ from one float32 rounding in the last bit).
func expShiftAffine(dst, x []float32, m, a, b float32) {
	x = x[:len(dst)]
	if hasVMathAVX512 {
		expShiftAffineF32AVX512(dst, x, m, a, b)
		return
	}
	expShiftAffineGo(dst, x, m, a, b)
}

func expShiftAffineGo(dst, x []float32, m, a, b float32) {
	x = x[:len(dst)]
	for i, v := range x {
		e := float32(math.Exp(float64(v - m)))
		dst[i] = float32(float64(a)*float64(e) + float64(b))
	}
}
