package emu

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"unsafe"

	"megago/cuda/internal/cublaslt"
	"megago/cuda/internal/dl"
	"megago/cuda/internal/driver"
)

// launchMu serialises kernel launches in the process: the library's statics (its
// fibers, gridDim, blockDim, the running thread's coordinates, __shared__ variables) are
// one set per process, whichever Device launches. One of the package's two process-wide
// variables (see the package doc).
var launchMu sync.Mutex

// Device is an opened emulator: memory, copies, kernel launches and GEMMs. Device
// pointers are the host addresses of memory the library allocated. Every call completes
// before it returns. Its methods may be called from several goroutines; launches take
// the process-wide launch lock, and so do several Devices of a process, which share the
// library.
type Device struct {
	path string

	launch func(name string, gx, gy, gz, bx, by, bz uint32, params unsafe.Pointer) int32
	malloc func(n uint64) uintptr
	free   func(p uintptr)
	htod   func(dst uintptr, src unsafe.Pointer, n uint64)
	dtoh   func(dst unsafe.Pointer, src uintptr, n uint64)
	dtod   func(dst, src uintptr, n uint64)
	memset func(p uintptr, size int32, v uint32, n uint64)
	gemm   func(g unsafe.Pointer) int32
}

// Open opens the emulator, building it with g++ into dir first unless dir holds the
// library of the current kernel sources already ("" means a folder under
// os.TempDir()). A failed build is an error quoting g++'s output.
func Open(dir string) (*Device, error) {
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "megago-cuda-emu")
	}
	path, err := build(dir, Source())
	if err != nil {
		return nil, err
	}
	lib, err := dl.OpenPath("kernel emulator", path)
	if err != nil {
		return nil, fmt.Errorf("emu: opening the kernel emulator %s: %w", path, err)
	}
	d := &Device{path: path}
	b := dl.NewBinder(lib)
	b.Bind(&d.launch, "emu_launch")
	b.Bind(&d.malloc, "emu_malloc")
	b.Bind(&d.free, "emu_free")
	b.Bind(&d.htod, "emu_htod")
	b.Bind(&d.dtoh, "emu_dtoh")
	b.Bind(&d.dtod, "emu_dtod")
	b.Bind(&d.memset, "emu_memset")
	b.Bind(&d.gemm, "emu_gemm")
	if err := b.Err(dl.Library{Name: "kernel emulator", Files: []string{path}}); err != nil {
		return nil, err
	}
	return d, nil
}

// Path returns the library's file.
func (d *Device) Path() string { return d.path }

// MemBytes is the memory the emulator claims to have: it allocates host memory on
// demand, so this only bounds a single allocation.
const MemBytes = 1 << 40

// Malloc allocates n bytes (256-byte aligned).
func (d *Device) Malloc(n int64) (driver.DevicePtr, error) {
	if n > MemBytes {
		return 0, fmt.Errorf("emu: %d bytes is more than the emulated %d", n, int64(MemBytes))
	}
	p := d.malloc(uint64(n))
	if p == 0 {
		return 0, fmt.Errorf("emu: malloc of %d bytes failed", n)
	}
	return driver.DevicePtr(p), nil
}

// Free frees memory from Malloc.
func (d *Device) Free(p driver.DevicePtr) { d.free(uintptr(p)) }

// HtoD copies src to dst.
func (d *Device) HtoD(dst driver.DevicePtr, src []byte) {
	if len(src) > 0 {
		d.htod(uintptr(dst), unsafe.Pointer(&src[0]), uint64(len(src)))
	}
}

// DtoH copies len(dst) bytes from src to dst.
func (d *Device) DtoH(dst []byte, src driver.DevicePtr) {
	if len(dst) > 0 {
		d.dtoh(unsafe.Pointer(&dst[0]), uintptr(src), uint64(len(dst)))
	}
}

// DtoD copies n bytes from src to dst (which may overlap).
func (d *Device) DtoD(dst, src driver.DevicePtr, n int64) {
	d.dtod(uintptr(dst), uintptr(src), uint64(n))
}

// Memset sets n elements of size bytes (1, 2 or 4) at p to v.
func (d *Device) Memset(p driver.DevicePtr, size int, v uint32, n int64) {
	d.memset(uintptr(p), int32(size), v, uint64(n))
}

// Launch runs kernel name on a grid of blocks, one block after another, with the
// parameters of args.
func (d *Device) Launch(name string, grid, block [3]uint32, args *driver.KernelArgs) error {
	launchMu.Lock()
	defer launchMu.Unlock()
	r := d.launch(name, grid[0], grid[1], grid[2], block[0], block[1], block[2], args.Params())
	runtime.KeepAlive(args)
	switch r {
	case 0:
		return nil
	case -1:
		return fmt.Errorf("emu: no kernel %s", name)
	}
	return fmt.Errorf("emu: %s: blocks of %d×%d×%d threads (at most 1024)", name, block[0], block[1], block[2])
}

// gemmArgs is emu_gemm's struct (runtime.hpp's EmuGemm, 8-byte fields).
type gemmArgs struct {
	typ, m, n, k, transA, transB, lda, ldb, ldd, batch int64
	strideA, strideB, strideD, epilogue, accumulate    int64
	auxLD                                              int64
	alpha                                              float64
	a, b, d, bias, aux                                 uintptr
}

// Gemm computes the product g describes as cuBLASLt would (cublaslt.Runner.Run's
// arguments), in double precision, one element after another. It needs no lock: the
// loop uses no statics.
func (d *Device) Gemm(g cublaslt.Gemm, alpha float64, a, b, out, bias, aux driver.DevicePtr) error {
	ld := func(ld, n int) int64 {
		if ld == 0 {
			return int64(n)
		}
		return int64(ld)
	}
	lda, ldb := ld(g.LDA, g.K), ld(g.LDB, g.N)
	if g.TransA {
		lda = ld(g.LDA, g.M)
	}
	if g.TransB {
		ldb = ld(g.LDB, g.K)
	}
	epi := g.Epilogue
	if epi == 0 {
		epi = cublaslt.EpilogueDefault
	}
	auxLD := g.AuxLD
	if auxLD == 0 {
		auxLD = int64(g.N)
	}
	ga := &gemmArgs{typ: int64(g.Type), m: int64(g.M), n: int64(g.N), k: int64(g.K), transA: b2i(g.TransA),
		transB: b2i(g.TransB), lda: lda, ldb: ldb, ldd: ld(g.LDD, g.N), batch: int64(max(1, g.Batch)),
		strideA: g.StrideA, strideB: g.StrideB, strideD: g.StrideD, epilogue: int64(epi), accumulate: b2i(g.Accumulate),
		auxLD: auxLD, alpha: alpha, a: uintptr(a), b: uintptr(b), d: uintptr(out), bias: uintptr(bias), aux: uintptr(aux)}
	if r := d.gemm(unsafe.Pointer(ga)); r != 0 {
		return fmt.Errorf("emu: GEMM of type %d with epilogue %d is not emulated", g.Type, epi)
	}
	return nil
}

func b2i(v bool) int64 {
	if v {
		return 1
	}
	return 0
}
