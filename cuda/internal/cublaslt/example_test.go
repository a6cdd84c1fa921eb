package cublaslt_test

import (
	"fmt"

	"megago/cuda/internal/cublaslt"
)

// DataType values are CUDA's cudaDataType_t (library_types.h): CUDA_R_32F 0, CUDA_R_64F
// 1, CUDA_R_16F 2, CUDA_R_16BF 14.
func ExampleDataType() {
	fmt.Println(cublaslt.TypeF32, cublaslt.TypeF64, cublaslt.TypeF16, cublaslt.TypeBF16)
	// Output: 0 1 2 14
}
