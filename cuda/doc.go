// Package cuda is megago's NVIDIA GPU backend: a tensor.Backend whose storage is device
// memory and whose ops are CUDA kernels and cuBLASLt GEMMs, fused kernels for
// transformer layers, and an NCCL implementation of parallel.Comm. It registers itself
// with package tensor as "cuda", so importing it (for its side effect) makes
// tensor.Open("cuda") work; on a machine without a GPU that returns an error wrapping
// ErrNoDevice, unless MEGAGO_CUDA_EMU=1 asks for the kernel emulator (see below).
//
// # Reading order
//
//   - backend.go: Open, Config and the Backend (MemStats, Properties, Sync, Close); the
//     other backend*.go files hold every tensor.Backend method; errflag.go: IndexError,
//     bad indices reported by kernels.
//   - errors.go: ErrNoDevice, Error, LoadError, CompileError, Properties and SearchEnv,
//     the names under which the bindings' errors and types are exported.
//   - alloc.go: the caching allocator (MemStats, OutOfMemoryError).
//   - gpu.go: the device behind a Backend (realGPU: one stream, cuBLASLt, compiled
//     modules); launch.go: launch geometry and the strided-index argument of kernels.
//   - backend_fused_rows.go, backend_fused_attention.go: tensor's fused-op seam
//     (tensor.RowKernels, tensor.AttentionKernels, tensor.SlotAttentionKernels) on GPU
//     kernels. Every RowKernels method
//     runs on the GPU for every float dtype (residual + LayerNorm/RMSNorm, bias + any
//     activation, bias + SwiGLU, bias + dropout + residual with the CPU backend's mask
//     bits, RoPE). Attention runs the flash kernels for bf16 and f32 with head sizes 8 to
//     128, grouped-query heads, Tq ≠ Tk, causal, padding masks, document segments, an
//     additive bias (T5) and dropout, and a decode step's attention over KV-cache slots
//     read in place; F16/F64 and other head sizes still take the host fallback
//     (host_fallback.go: copy to the host, run the CPU kernel, copy back).
//   - fused.go, fused_attention.go: the launches behind the seam and other fused kernels
//     (the GPT encoder, linear layers with cuBLASLt epilogues), each documented with its
//     CPU twin.
//   - nccl_comm.go, nccl_send.go: Comm, parallel.Comm over NCCL (NewComm,
//     NewCommFromEnv); nccl_device.go: what a Comm needs from the device and from NCCL,
//     on a real GPU or on the emulator.
//   - emulator.go: the kernel emulator as a device (EnvEmulator).
//
// The raw bindings are internal packages:
//
//   - internal/dl: the search for libcuda, NVRTC, cuBLASLt and NCCL at run time
//     (Library, SearchEnv), opening them with purego and binding their functions; the
//     errors every binding returns.
//   - internal/driver: the driver API (Driver, GPU with its primary context, streams,
//     events, memory, modules, kernel launches with KernelArgs, CUDA graphs).
//   - internal/nvrtc: NVRTC, the run-time compiler (Compile, CompileError).
//   - internal/cublaslt: cuBLASLt; Gemm describes a batched product with its epilogue
//     (bias, GeLU, their gradients) in row-major terms and Runner runs it, choosing and
//     caching an algorithm per shape and pointer alignment.
//   - internal/nccl: NCCL's communicator calls.
//   - internal/kernels: the CUDA C kernels (embedded *.cu), their modules and the NVRTC
//     compilation with its disk cache.
//   - internal/emu: the kernel emulator (the kernels built for the host with g++) and
//     its emulated NCCL.
//
// # Finding the libraries
//
// Nothing is linked at build time: the module builds with CGO_ENABLED=0 and no CUDA
// toolkit, and the libraries are opened with github.com/ebitengine/purego when a device
// is opened. Each library is looked for under the file names of CUDA 13, 12 and 11
// (libnvrtc.so.13, .so.12, .so.11.2; libcublasLt.so.13/12/11; libnccl.so.2;
// libcuda.so.1), newest first, in MEGAGO_CUDA_LIBS (EnvLibDirs), CUDA_HOME (and
// CUDA_PATH, CUDA_ROOT), LD_LIBRARY_PATH, the nvidia/*/lib folders of Python wheels, the
// system's folders and finally through the system loader (Config.Search changes what
// the search sees). The driver library is never taken from the toolkit or a wheel,
// which ship only a stub of it. A library that cannot be found or opened is a
// *LoadError wrapping ErrNoDevice that lists the names looked for, the folders looked in
// and why each file found failed to open. Opening a Backend needs libcuda, cuBLASLt and
// a device; NVRTC is needed to compile kernels that are not in the cache yet; NCCL is
// opened by the first NewComm.
//
// # Calling C without cgo
//
// Each library's functions are bound with purego.RegisterFunc to Go func fields of the
// library's type; a missing required symbol makes the load fail with a *LoadError naming
// it (a library too old), optional ones (cuMemAllocAsync, CUDA graphs, cubin output of
// NVRTC) are used when present. CUDA's current context belongs to an OS thread, so every
// driver call happens between a bind of the device (which locks the goroutine to its
// thread and makes the context current) and the release it returns. Binaries that
// import this package are dynamically linked against libc (purego's loader), even with
// CGO_ENABLED=0.
//
// # Kernels
//
// The kernels are CUDA C in internal/kernels/*.cu, embedded with go:embed. They are
// self-contained: no #include (the NVRTC of Debian's libnvrtc11.2, which CI uses to
// compile-check them, ships no toolkit headers), their own bf16/fp16 conversions by bit
// manipulation (round to nearest even, as package tensor's), Philox-4x32-10 with
// tensor/rng.go's counter layout, and nothing newer than CUDA 11.8 (sm_70 or newer:
// double atomics). prelude.cu is prepended to every module. A module is compiled on first
// use for the device's architecture (a CUBIN when NVRTC knows it, else PTX for the newest
// architecture it knows, which the driver compiles) and cached in DefaultCacheDir under a
// name that hashes the source and options and ends in NVRTC's version; files are written
// under a temporary name and renamed. Without NVRTC a cached image of the same source
// from any NVRTC is used. The fused attention kernels are one module per dtype and head
// size (8, 16, 32, 64, 128), so only the variants a model uses are compiled.
//
// # Numerics
//
// As on the CPU backend, F32, BF16 and F16 tensors are computed in float32 and F64 and
// integer tensors in float64; conversions round to nearest even (a float64 is rounded to
// bf16 or fp16 once, through round-to-odd). Row reductions (softmax, norms, cross
// entropy) sum in float32 by a tree within a block, Reduce and SumSquares in float64;
// results agree with the CPU backend within rounding, not bit for bit. Random draws use
// the same element counters as the CPU, so uniform, Bernoulli and dropout values are
// identical on both backends and at every parallel layout. Index gathers
// (ScatterAdd, EmbeddingBackward) add with atomics, in an order that varies from run to
// run; the weight and bias gradients of norms and fused layers are column sums in a
// fixed order. Matrix products run on cuBLASLt: BF16 and F16 accumulate in float32; F32
// uses float32 unless Config.AllowTF32.
//
// # Memory and streams
//
// Every op of a Backend is queued in order on one stream; host copies (WriteHost,
// ReadHost, Item) and Sync wait for the work queued before them. Storage comes from a caching
// allocator: blocks rounded to 512 B (2 MiB above 1 MiB) are kept for reuse when freed,
// which is safe because the one stream orders a block's next use after its last; when
// the driver runs out of memory the cache is given back and the allocation tried once
// more before an *OutOfMemoryError (the size asked, what megago holds, what the device
// has free) is raised. MemStats reports allocated, reserved and peak bytes.
//
// # Errors
//
// Everything the machine can cause (a missing library or device, a failed CUDA call) is
// an error value: ErrNoDevice (test with errors.Is) or an *Error naming the library, the
// function and CUDA's own name and description of the result code. tensor.Backend's
// methods return nothing, so the Backend panics with such an error value
// (*Error, *OutOfMemoryError), and with an *IndexError when a kernel met an index out of
// range (kernels record the first one and the backend raises it at the next wait on
// the device: Sync or a host copy, as tensor.Backend's Sync documents); training entry
// points recover these panics into errors. Caller bugs (shapes, dtypes, a freed buffer)
// panic with a message naming the op.
//
// # The kernel emulator
//
// With MEGAGO_CUDA_EMU=1 (EnvEmulator) in the environment, Open, and so
// tensor.Open("cuda"), open the kernel emulator instead of a GPU, in any program and on
// any machine with g++ (C++20): no GPU, libcuda, cuBLASLt, NVRTC or NCCL is needed. Its
// kernels are the CUDA C sources of internal/kernels compiled by g++ for the host, a
// block's threads running as fibers on the calling thread (a block after another, a
// thread after another between barriers); its GEMMs are a plain loop in double precision
// with cuBLASLt's semantics and epilogues; its memory is host memory. The library is
// built on first use (a few seconds) into the cache folder's emu/ subfolder
// (Config.CacheDir, else DefaultCacheDir), under the SHA-256 of its source and compiler
// flags, so a change to a kernel rebuilds it and concurrent processes share it. A failed
// build (no g++, a compile error) is an error from Open that quotes the compiler's
// output, never a silent fallback. The emulated device reports itself as "kernel
// emulator" and ignores Config.Device.
//
// Its NCCL is emulated too: NewComm on emulator Backends creates Comms whose calls go
// through the same code as on a GPU to an in-process NCCL, where the ranks, goroutines
// of one process with a Backend each, meet by unique id and exchange data through the
// in-process transport (reductions in rank order, as parallel.RunLocal's). So a program
// runs --ranks N goroutine ranks with NCCL collectives and point-to-point on one machine
// (see ExampleNewComm); ranks in separate processes cannot meet on the emulator.
//
// What it checks: the kernels' logic (indexing, block reductions, barriers, shuffles,
// bf16/fp16 rounding, Philox streams), the launch geometry and arguments, the backend's
// copies and allocator, and the Comm's NCCL calls (types, counts, staging). What it does
// not: the CUDA driver and its streams (every call completes before it returns),
// cuBLASLt and TF32, NVRTC, real NCCL and its transports, memory limits, races (atomics
// are never contended; blocks, and threads between barriers, run one after another), and
// speed (it runs on one CPU core per launch: use small models). The emulator's library
// is shared by the process: kernel launches take one process-wide lock (internal/emu's
// launchMu), so any number of Backends and goroutine ranks may use it at once.
//
// # Testing
//
// Tests that need a GPU skip with a message saying so (MEGAGO_REQUIRE_GPU=1 makes them
// fail instead); on a GPU they run the op suite, every fused kernel and a short GPT
// training run against the CPU backend. TestKernelsCompile (in internal/kernels)
// compiles every module for sm_80 and sm_90 with NVRTC (MEGAGO_REQUIRE_NVRTC=1 makes a
// missing NVRTC a failure, as in CI). With MEGAGO_CUDA_EMU=1 the GPU tests run on the
// emulator, and so do the NCCL Comm tests, with goroutine ranks, against the in-process
// transport; an emulator that fails to build fails them. The bindings' own tests (library search, kernel arguments, the GEMM mapping, NVRTC)
// are in their internal packages. cuda/gpucheck has the script that runs the checks and
// benchmarks on a GPU machine without Go.
//
// # Shapes
//
// B batch, T sequence, C channels, NH heads, HS head size, V vocabulary; rows = B·T for
// activations viewed as [rows, C].
package cuda
