//go:build !purego

package tensor

// adamF32AVX512 runs adamKernel over the first len(ps) &^ 15 elements (see optim_amd64.s).
//
//go:noescape
func adamF32AVX512(ps, gs, ms, vs []float32, k *adamConsts[float32])

// sumSquares4F32AVX512 runs sumSquares's main loop over the first n (a multiple of 4)
// elements of the four blocks a, b, c, d, and stores block i's accumulators s0..s3 in
// out[4i:4i+4] (see optim_amd64.s).
//
//go:noescape
func sumSquares4F32AVX512(a, b, c, d *float32, n int, out *[16]float64)
