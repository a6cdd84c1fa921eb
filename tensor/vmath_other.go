//go:build !amd64 || purego

package tensor

const hasVMathAVX512 = false

func expSumF32AVX512([]float32, float64, float64) float64                 { panic("unreachable") }
func expAffineSumF32AVX512(_, _ []float32, _, _, _, _ float64) float64    { panic("unreachable") }
func geluTanhF32AVX512(_, _ []float32)                                    { panic("unreachable") }
func geluTanhBackwardF32AVX512(_, _, _ []float32)                         { panic("unreachable") }
func maxSumF32AVX512([]float32) (float32, float64)                        { panic("unreachable") }
func sqDevSumF32AVX512([]float32, float64) float64                        { panic("unreachable") }
func normRowF32AVX512(_, _, _, _ []float32, _, _ float64)                 { panic("unreachable") }
func normBwdSumsF32AVX512(_, _, _ []float32, _, _ float64) (_, _ float64) { panic("unreachable") }
func normBwdRowF32AVX512(_, _, _, _ []float32, _, _, _, _ float64)        { panic("unreachable") }
func normBwdColsF32AVX512(_, _ []float64, _, _ []float32, _, _ float64)   { panic("unreachable") }
func dotF32AVX512(_, _ []float32) float64                                 { panic("unreachable") }
func softmaxBwdRowF32AVX512(_, _, _ []float32, _, _ float64)              { panic("unreachable") }
func binaryF32AVX512(int, []float32, []float32, []float32, int)           { panic("unreachable") }
func maxF32AVX512([]float32) float32                                      { panic("unreachable") }

func addColsF32AVX512([]float64, []float32)              { panic("unreachable") }
func geluTanhBiasF32AVX512(_, _, _ []float32)            { panic("unreachable") }
func geluTanhBiasBackwardF32AVX512(_, _, _, _ []float32) { panic("unreachable") }
