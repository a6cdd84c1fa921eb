// Package cuda is megago's NVIDIA GPU backend. Its pieces, in reading order:
//
//   - errors.go, find.go: ErrNoDevice, LoadError and Error; Library and SearchEnv, the
//     search for libcuda, NVRTC, cuBLASLt and NCCL at run time.
//   - driver.go, driver_ops.go, args.go: the driver API (Driver, GPU with its primary
//     context, streams, events, memory, modules, kernel launches with KernelArgs, CUDA
//     graphs).
//   - nvrtc.go: NVRTC, the run-time compiler (Compile, CompileError).
//   - cublaslt.go, gemm.go: cuBLASLt; Gemm describes a batched product with its epilogue
//     (bias, GeLU, their gradients) in row-major terms and GemmRunner runs it, choosing
//     and caching an algorithm per shape and pointer alignment.
//   - nccl.go: NCCL's communicator calls.
//   - kernels/*.cu, kernels.go, compile.go: the CUDA C kernels (embedded), their modules
//     and the NVRTC compilation with its disk cache.
//
// # Finding the libraries
//
// Nothing is linked at build time: the module builds with CGO_ENABLED=0 and no CUDA
// toolkit, and the libraries are opened with github.com/ebitengine/purego when a device
// is opened. Each library is looked for under the file names of CUDA 13, 12 and 11
// (libnvrtc.so.13, .so.12, .so.11.2; libcublasLt.so.13/12/11; libnccl.so.2;
// libcuda.so.1), newest first, in MEGAGO_CUDA_LIBS, CUDA_HOME (and CUDA_PATH,
// CUDA_ROOT), LD_LIBRARY_PATH, the nvidia/*/lib folders of Python wheels, the system's
// folders and finally through the system loader (Library.Dirs has the exact order). The
// driver library is never taken from the toolkit or a wheel, which ship only a stub of
// it. A library that cannot be found or opened is a *LoadError wrapping ErrNoDevice
// that lists the names looked for, the folders looked in and why each file found failed
// to open.
//
// # Calling C without cgo
//
// Each library's functions are bound with purego.RegisterFunc to Go func fields of the
// library's type; a missing required symbol makes the load fail with a *LoadError naming
// it (a library too old), optional ones (cuMemAllocAsync, CUDA graphs, cubin output of
// NVRTC) are used when present. CUDA's current context belongs to an OS thread, so every
// driver call happens between GPU.Bind (which locks the goroutine to its thread and makes
// the context current) and the release it returns.
//
// # Kernels
//
// The kernels are CUDA C in kernels/*.cu, embedded with go:embed. They are
// self-contained: no #include (the NVRTC of Debian's libnvrtc11.2, which CI uses to
// compile-check them, ships no toolkit headers), their own bf16/fp16 conversions by bit
// manipulation (round to nearest even, as package tensor's), Philox-4x32-10 with
// tensor/rng.go's counter layout, and nothing newer than CUDA 11.8. prelude.cu is
// prepended to every module. A module is compiled on first use for the device's
// architecture (a CUBIN when NVRTC knows it, else PTX for the newest architecture it
// knows, which the driver compiles) and cached in DefaultCacheDir under a name that
// hashes the source, the options and NVRTC's version; files are written under a
// temporary name and renamed. The fused attention kernels are one module per dtype and
// head size (32, 64, 128), so only the variants a model uses are compiled.
//
// # Errors
//
// Everything the machine can cause (a missing library or device, a failed CUDA call) is
// an error value: ErrNoDevice (test with errors.Is) or an *Error naming the library,
// the function and CUDA's own name and description of the result code.
package cuda
