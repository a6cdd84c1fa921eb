package cuda

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"megago/cuda/internal/cublaslt"
	"megago/cuda/internal/dl"
	"megago/cuda/internal/driver"
	"megago/cuda/internal/kernels"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"unsafe"
)

// The kernel emulator: with MEGAGO_CUDA_EMU=1 and g++ on the machine, the GPU tests run on
// a backend whose kernels are the CUDA C sources compiled for the host by g++ against
// testdata/emu/shim.hpp (threads for a block's threads, barriers for __syncthreads), and
// whose GEMMs are a plain loop. It checks the kernels' logic and the backend's launches
// where no GPU is available; it says nothing about the driver, cuBLASLt or speed.
// Not run by default (building the emulator takes a minute).

// emuBuild builds (or finds in the cache) the emulator library once per test process.
var emuBuild = sync.OnceValues(buildEmulator)

// emuSource returns the C++ translation unit: the shim, every module's source and the
// launch table.
func emuSource() string {
	shim, err := os.ReadFile("testdata/emu/shim.hpp")
	if err != nil {
		panic(err)
	}
	var b strings.Builder
	b.Write(shim)
	pre, _ := kernels.ReadFile("prelude.cu")
	b.WriteString(strings.Replace(string(pre), `asm("cvt.rz.f32.f64 %0, %1;" : "=f"(r) : "d"(x));`, "r = emu_cvt_rz(x);", 1))
	mods := kernels.Modules()
	var names []string
	files := map[string]bool{}
	for _, name := range kernels.Names() {
		m := mods[name]
		if !files[m.File] {
			files[m.File] = true
			src, _ := kernels.ReadFile(m.File + ".cu")
			b.Write(src)
			b.WriteString("\n")
		}
		b.WriteString(m.Extra)
		for _, k := range m.Kernels {
			if !containsString(names, k) {
				names = append(names, k)
			}
		}
	}
	rt, err := os.ReadFile("testdata/emu/runtime.cpp")
	if err != nil {
		panic(err)
	}
	b.Write(rt)
	b.WriteString("static int emu_reg = [] {\n  auto& m = emu_registry();\n")
	for _, k := range names {
		fmt.Fprintf(&b, "  m[%q] = [](void** p) { emu_call(%s, p); };\n", k, k)
	}
	b.WriteString("  return 0;\n}();\n")
	return b.String()
}

func containsString(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

// emuLib is the opened emulator.
type emuLib struct {
	launch func(name string, gx, gy, gz, bx, by, bz uint32, params unsafe.Pointer) int32
	malloc func(n uint64) uintptr
	free   func(p uintptr)
	htod   func(dst uintptr, src unsafe.Pointer, n uint64)
	dtoh   func(dst unsafe.Pointer, src uintptr, n uint64)
	dtod   func(dst, src uintptr, n uint64)
	memset func(p uintptr, size int32, v uint32, n uint64)
	gemm   func(g unsafe.Pointer) int32
}

func buildEmulator() (*emuLib, error) {
	if _, err := exec.LookPath("g++"); err != nil {
		return nil, fmt.Errorf("the emulator needs g++: %w", err)
	}
	src := emuSource()
	sum := sha256.Sum256([]byte(src))
	dir := filepath.Join(DefaultCacheDir(), "emu")
	so := filepath.Join(dir, "emu-"+hex.EncodeToString(sum[:12])+".so")
	if _, err := os.Stat(so); err != nil {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		cpp := so + ".cpp"
		if err := os.WriteFile(cpp, []byte(src), 0o644); err != nil {
			return nil, err
		}
		tmp := so + ".tmp"
		out, err := exec.Command("g++", "-std=c++20", "-O1", "-fPIC", "-shared", "-pthread", "-w", "-o", tmp, cpp).CombinedOutput()
		if err != nil {
			return nil, fmt.Errorf("g++: %v\n%s", err, out)
		}
		if err := os.Rename(tmp, so); err != nil {
			return nil, err
		}
	}
	lib, err := dl.OpenPath("emulator", so)
	if err != nil {
		return nil, err
	}
	l := &emuLib{}
	b := dl.NewBinder(lib)
	b.Bind(&l.launch, "emu_launch")
	b.Bind(&l.malloc, "emu_malloc")
	b.Bind(&l.free, "emu_free")
	b.Bind(&l.htod, "emu_htod")
	b.Bind(&l.dtoh, "emu_dtoh")
	b.Bind(&l.dtod, "emu_dtod")
	b.Bind(&l.memset, "emu_memset")
	b.Bind(&l.gemm, "emu_gemm")
	if err := b.Err(dl.Library{Name: "emulator"}); err != nil {
		return nil, err
	}
	return l, nil
}

// emuGPU is the gpu interface on the emulator: device pointers are host addresses of
// memory the emulator allocated.
type emuGPU struct {
	l  *emuLib
	mu sync.Mutex // one launch at a time: blocks share the emulator's statics
}

func (e *emuGPU) alloc(n int64) (driver.DevicePtr, error) {
	if n > 1<<40 {
		return 0, fmt.Errorf("emulator: %d bytes is more than the emulated 1 TiB", n)
	}
	p := e.l.malloc(uint64(n))
	if p == 0 {
		return 0, fmt.Errorf("emulator: malloc of %d bytes failed", n)
	}
	return driver.DevicePtr(p), nil
}
func (e *emuGPU) free(p driver.DevicePtr) error  { e.l.free(uintptr(p)); return nil }
func (e *emuGPU) memInfo() (int64, int64, error) { return 1 << 40, 1 << 40, nil }
func (e *emuGPU) sync() error                    { return nil }
func (e *emuGPU) bind() func()                   { return func() {} }
func (e *emuGPU) close() error                   { return nil }
func (e *emuGPU) props() Properties {
	return Properties{Name: "kernel emulator", Major: 8, SMs: 1, MaxThreadsPerBlock: 1024}
}

func (e *emuGPU) htod(dst driver.DevicePtr, src []byte) error {
	if len(src) > 0 {
		e.l.htod(uintptr(dst), unsafe.Pointer(&src[0]), uint64(len(src)))
	}
	return nil
}

func (e *emuGPU) dtoh(dst []byte, src driver.DevicePtr) error {
	if len(dst) > 0 {
		e.l.dtoh(unsafe.Pointer(&dst[0]), uintptr(src), uint64(len(dst)))
	}
	return nil
}

func (e *emuGPU) dtod(dst, src driver.DevicePtr, n int64) error {
	e.l.dtod(uintptr(dst), uintptr(src), uint64(n))
	return nil
}

func (e *emuGPU) memset(p driver.DevicePtr, size int, v uint32, n int64) error {
	e.l.memset(uintptr(p), int32(size), v, uint64(n))
	return nil
}

func (e *emuGPU) launch(mod, name string, grid, block [3]uint32, shared int, args *driver.KernelArgs) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	r := e.l.launch(name, grid[0], grid[1], grid[2], block[0], block[1], block[2], args.Params())
	runtime.KeepAlive(args)
	if r != 0 {
		return fmt.Errorf("emulator: no kernel %s", name)
	}
	return nil
}

// emuGemm is the emulator's GEMM description (emu_gemm's struct, 8-byte fields).
type emuGemm struct {
	typ, m, n, k, transA, transB, lda, ldb, ldd, batch int64
	strideA, strideB, strideD, epilogue, accumulate    int64
	auxLD                                              int64
	alpha                                              float64
	a, b, d, bias, aux                                 uintptr
}

func (e *emuGPU) gemm(g cublaslt.Gemm, alpha float64, a, b, d, bias, aux driver.DevicePtr) error {
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
	eg := &emuGemm{typ: int64(g.Type), m: int64(g.M), n: int64(g.N), k: int64(g.K), transA: b2i(g.TransA),
		transB: b2i(g.TransB), lda: lda, ldb: ldb, ldd: ld(g.LDD, g.N), batch: int64(max(1, g.Batch)),
		strideA: g.StrideA, strideB: g.StrideB, strideD: g.StrideD, epilogue: int64(epi), accumulate: b2i(g.Accumulate),
		auxLD: auxLD, alpha: alpha, a: uintptr(a), b: uintptr(b), d: uintptr(d), bias: uintptr(bias), aux: uintptr(aux)}
	e.mu.Lock()
	defer e.mu.Unlock()
	if r := e.l.gemm(unsafe.Pointer(eg)); r != 0 {
		return fmt.Errorf("emulator: gemm of type %d with epilogue %d unsupported", g.Type, epi)
	}
	return nil
}

func b2i(v bool) int64 {
	if v {
		return 1
	}
	return 0
}

// openEmulatedBackend returns a backend on the emulator when MEGAGO_CUDA_EMU=1 (skipping
// the test if it cannot be built), else nil.
func openEmulatedBackend(t *testing.T) *Backend {
	t.Helper()
	if os.Getenv("MEGAGO_CUDA_EMU") != "1" {
		return nil
	}
	l, err := emuBuild()
	if err != nil {
		t.Skipf("MEGAGO_CUDA_EMU=1: %v", err)
	}
	b, err := newBackend(&emuGPU{l: l}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	b.maxBlocks = 2 // every block is a few hundred threads to start: keep grids small
	return b
}
