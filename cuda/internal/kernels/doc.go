// Package kernels holds package cuda's CUDA C kernels (the embedded *.cu files), the
// modules they are compiled in (Modules, Source) and the compilation with NVRTC and its
// disk cache (Compiler).
//
// The sources are self-contained: no #include (the NVRTC of Debian's libnvrtc11.2, which
// CI uses to compile-check them, ships no toolkit headers), their own bf16/fp16
// conversions, and nothing newer than CUDA 11.8. prelude.cu is prepended to every
// module. A module is compiled for the device's architecture (a CUBIN when NVRTC knows
// it, else PTX for the newest architecture it knows) and cached under a name that hashes
// the source and options and ends in NVRTC's version. Nothing here is public API.
package kernels
