//go:build !purego

package tensor

// adamF32AVX512 runs adamKernel over the first len(ps) &^ 15 elements (see optim_amd64.s).
//
//go:noescape
func adamF32AVX512(ps, gs, ms, vs []float32, k *adamConsts[float32])
