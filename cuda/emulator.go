package cuda

import (
	"fmt"
	"path/filepath"

	"megago/cuda/internal/cublaslt"
	"megago/cuda/internal/driver"
	"megago/cuda/internal/emu"
)

// EnvEmulator is the environment variable that, set to "1", makes Open open the kernel
// emulator instead of a GPU (see the package doc): MEGAGO_CUDA_EMU=1.
const EnvEmulator = "MEGAGO_CUDA_EMU"

// emuMaxBlocks bounds the emulator's grids: every block starts a few hundred host
// threads, and grid-stride kernels cover any size with few blocks.
const emuMaxBlocks = 2

// emulated reports whether env asks for the emulator.
func emulated(env SearchEnv) bool { return env.Getenv(EnvEmulator) == "1" }

// openEmulator opens the kernel emulator as a Backend, building it into the cache first
// if needed. A failed build is an error quoting the compiler's output.
func openEmulator(cfg Config) (*Backend, error) {
	dir := cfg.CacheDir
	if dir == "" {
		dir = DefaultCacheDir()
	}
	if dir != "" {
		dir = filepath.Join(dir, "emu")
	}
	d, err := emu.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("cuda: %s=1: %w", EnvEmulator, err)
	}
	cfg.Device = 0
	b, err := newBackend(&emuGPU{d: d}, cfg)
	if err != nil {
		return nil, err
	}
	b.maxBlocks = emuMaxBlocks
	return b, nil
}

// emuGPU is the gpu interface on the emulator: device pointers are host addresses of
// memory the emulator allocated, and every call completes before it returns, so there is
// nothing to wait for and one stream is as good as another.
type emuGPU struct {
	d *emu.Device
}

func (e *emuGPU) alloc(n int64) (driver.DevicePtr, error) { return e.d.Malloc(n) }
func (e *emuGPU) free(p driver.DevicePtr) error           { e.d.Free(p); return nil }
func (e *emuGPU) memInfo() (int64, int64, error)          { return emu.MemBytes, emu.MemBytes, nil }
func (e *emuGPU) sync() error                             { return nil }
func (e *emuGPU) bind() func()                            { return func() {} }
func (e *emuGPU) close() error                            { return nil }

func (e *emuGPU) props() Properties {
	return Properties{Name: "kernel emulator", Major: 8, SMs: 1, MaxThreadsPerBlock: 1024, TotalMem: emu.MemBytes}
}

func (e *emuGPU) htod(dst driver.DevicePtr, src []byte) error { e.d.HtoD(dst, src); return nil }
func (e *emuGPU) dtoh(dst []byte, src driver.DevicePtr) error { e.d.DtoH(dst, src); return nil }

func (e *emuGPU) dtod(dst, src driver.DevicePtr, n int64) error { e.d.DtoD(dst, src, n); return nil }

func (e *emuGPU) memset(p driver.DevicePtr, size int, v uint32, n int64) error {
	e.d.Memset(p, size, v, n)
	return nil
}

func (e *emuGPU) launch(mod, name string, grid, block [3]uint32, shared int, args *driver.KernelArgs) error {
	return e.d.Launch(name, grid, block, args)
}

func (e *emuGPU) gemm(g cublaslt.Gemm, alpha float64, a, b, d, bias, aux driver.DevicePtr) error {
	return e.d.Gemm(g, alpha, a, b, d, bias, aux)
}

// The emulator's NCCL is emu.NCCL; its streams and events are placeholders, every event
// reached when it is recorded.

func (e *emuGPU) loadNCCL(SearchEnv) (ncclAPI, error)         { return e.d.NCCL(), nil }
func (e *emuGPU) mainStream() driver.Stream                   { return 0 }
func (e *emuGPU) newStream() (driver.Stream, error)           { return 0, nil }
func (e *emuGPU) syncStream(driver.Stream) error              { return nil }
func (e *emuGPU) destroyStream(driver.Stream) error           { return nil }
func (e *emuGPU) newEvent() (driver.Event, error)             { return 0, nil }
func (e *emuGPU) destroyEvent(driver.Event) error             { return nil }
func (e *emuGPU) record(driver.Event, driver.Stream) error    { return nil }
func (e *emuGPU) waitEvent(driver.Stream, driver.Event) error { return nil }
func (e *emuGPU) reached(driver.Event) (bool, error)          { return true, nil }

var _ ncclDevice = (*emuGPU)(nil)
