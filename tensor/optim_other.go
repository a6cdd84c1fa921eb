//go:build !amd64 || purego

package tensor

func adamF32AVX512(_, _, _, _ []float32, _ *adamConsts[float32]) { panic("unreachable") }

func sumSquares4F32AVX512(_, _, _, _ *float32, _ int, _ *[16]float64) { panic("unreachable") }
