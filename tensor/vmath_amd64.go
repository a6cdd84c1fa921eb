//go:build !purego

package tensor

import "golang.org/x/sys/cpu"

// hasVMathAVX512 reports whether vmath_amd64.s can run (fixed at init).
var hasVMathAVX512 = cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL

//go:noescape
func expSumF32AVX512(src []float32, scale, shift float64) float64

//go:noescape
func expAffineSumF32AVX512(dst, src []float32, alpha, scale, shift, beta float64) float64

//go:noescape
func geluTanhF32AVX512(dst, src []float32)

//go:noescape
func geluTanhBackwardF32AVX512(dx, x, dy []float32)

//go:noescape
func maxSumF32AVX512(src []float32) (mx float32, sum float64)

//go:noescape
func sqDevSumF32AVX512(x []float32, mu float64) float64

//go:noescape
func normRowF32AVX512(y, x, w, b []float32, mu, rs float64)

//go:noescape
func normBwdSumsF32AVX512(dy, x, w []float32, mu, rs float64) (sg, sgx float64)

//go:noescape
func normBwdRowF32AVX512(dx, dy, x, w []float32, mu, rs, sg, sgx float64)

//go:noescape
func normBwdColsF32AVX512(sw, sb []float64, dy, x []float32, mu, rs float64)

//go:noescape
func dotF32AVX512(a, b []float32) float64

//go:noescape
func softmaxBwdRowF32AVX512(dx, y, dy []float32, scale, s float64)

//go:noescape
func binaryF32AVX512(op int, d, a, b []float32, bStride int)

//go:noescape
func maxF32AVX512(src []float32) float32

//go:noescape
func addColsF32AVX512(acc []float64, row []float32)

//go:noescape
func geluTanhBiasF32AVX512(dst, src, bias []float32)

//go:noescape
func geluTanhBiasBackwardF32AVX512(dx, x, bias, dy []float32)
