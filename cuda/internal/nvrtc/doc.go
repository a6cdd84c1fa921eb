// Package nvrtc binds NVRTC (libnvrtc), CUDA's run-time compiler of CUDA C to PTX or
// CUBIN. It needs no GPU: kernels compile on any machine that has the library (CI uses
// Debian's libnvrtc11.2). Package cuda's kernel cache is built on it; nothing here is
// public API.
package nvrtc
