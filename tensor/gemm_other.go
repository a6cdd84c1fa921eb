//go:build !amd64 || purego

package tensor

// gemmKernels returns the SIMD kernels this CPU can run: none on this platform, where
// float32 MatMul uses the portable matmulRef.
func gemmKernels() []*gemmKernel { return nil }
