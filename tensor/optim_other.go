//go:build !amd64 || purego

package tensor

func adamF32AVX512(_, _, _, _ []float32, _ *adamConsts[float32]) { panic("unreachable") }
