// Package cublaslt binds cuBLASLt (libcublasLt) for package cuda's matrix products: Gemm
// describes a batched product with its epilogue (bias, GeLU, their gradients) in
// megago's row-major terms, and a Runner maps it to cuBLASLt's column-major call,
// chooses and caches an algorithm per shape and pointer alignment, and queues it on a
// stream. Nothing here is public API.
package cublaslt
