// Package emu is package cuda's kernel emulator: an emulated GPU whose kernels are the
// CUDA C sources of ../kernels compiled for the host by g++, and an emulated NCCL over
// its memory, so that the GPU code path runs where there is no GPU (CI, laptops).
//
// # Reading order
//
//   - source.go: Source, the C++ translation unit: shim.hpp (just enough CUDA C++:
//     __syncthreads a yield, __shared__ variables statics), every kernel module,
//     runtime.hpp (a block's threads as fibers on the launching thread, memory, and a
//     GEMM that is a plain loop in double) and the table of kernels by name.
//   - build.go: the shared library's build with g++ and its disk cache.
//   - device.go: Open and Device: memory (host memory the emulator allocated, addressed
//     by its host address), copies, kernel launches and GEMMs.
//   - nccl.go: NCCL, the emulated collective library: communicators meet by unique id in
//     the process and exchange data through package parallel's in-process transport.
//
// # What it checks
//
// The kernels' logic (indexing, reductions across a block's threads, bf16/fp16
// rounding, Philox streams), their barriers (threads run one after another between two
// barriers, so a missing __syncthreads usually gives a wrong result), the launch
// geometry and arguments package cuda passes, the order of its copies and the NCCL calls
// of its Comm. It says nothing about the CUDA driver, cuBLASLt (its GEMMs are a loop
// with cuBLASLt's semantics), NCCL's transports, memory limits or speed; atomics are
// never contended and blocks run one after another, so races between threads that a
// barrier does not order, and between blocks, go unnoticed.
//
// # Process-wide state
//
// The shared library's statics (the fibers, gridDim, blockDim and the running thread's
// coordinates, __shared__ variables) exist once per process, so kernel launches take one process-wide lock
// (launchMu), and communicators meet in one process-wide table (ncclWorld). These two
// are this package's only mutable package-level variables; the equivalent state of a
// real GPU lives in its driver and in libnccl, which are per process too.
//
// # Cache
//
// The library is written to DIR/emu-HASH.so, HASH being the SHA-256 of its source and
// g++'s flags, via a temporary name, fsync and rename (package atomicfile), so processes
// building it at the same time each get a complete file. A build takes a few seconds
// (about 4 s of CPU).
package emu
