// Package cuda will be megago's NVIDIA GPU backend. It is planned and not yet
// implemented; this comment records what it will contain (see DESIGN.md).
//
//   - Bindings to libcuda, cuBLASLt, NVRTC and NCCL opened at run time with
//     github.com/ebitengine/purego, so the module builds with CGO_ENABLED=0
//     and no CUDA toolkit. A missing library is an error value (ErrNoDevice,
//     naming the libraries tried), never a crash or a build failure.
//   - A caching allocator behind tensor's memory scopes.
//   - cuBLASLt GEMMs and fused kernels written in CUDA C, embedded with
//     go:embed, compiled by NVRTC on first use and cached on disk. Each fused
//     kernel has a CPU twin in the CPU backend that GPU tests compare against.
//   - An NCCL implementation of parallel.Comm, bootstrapped over the same
//     rendezvous as the TCP transport.
//
// Package cuda registers itself with package tensor, as database/sql drivers
// do.
package cuda
