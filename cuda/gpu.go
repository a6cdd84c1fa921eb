package cuda

import (
	"fmt"
	"sync"

	"megago/cuda/internal/cublaslt"
	"megago/cuda/internal/driver"
	"megago/cuda/internal/kernels"
	"megago/cuda/internal/nvrtc"
)

// gpu is what the Backend needs from a device: memory, copies, kernels and GEMMs, all
// queued in order on one stream. realGPU is the CUDA driver with cuBLASLt and NVRTC;
// tests can put a fake behind the same interface.
type gpu interface {
	memAPI
	htod(dst driver.DevicePtr, src []byte) error // returns once src may be reused
	dtoh(dst []byte, src driver.DevicePtr) error // returns once dst holds the data
	dtod(dst, src driver.DevicePtr, bytes int64) error
	memset(p driver.DevicePtr, size int, v uint32, n int64) error
	launch(mod, name string, grid, block [3]uint32, shared int, args *driver.KernelArgs) error
	gemm(g cublaslt.Gemm, alpha float64, a, b, d, bias, aux driver.DevicePtr) error
	sync() error
	props() Properties
	bind() (release func())
	close() error
}

// realGPU is a device driven through libcuda, with cuBLASLt for GEMMs and NVRTC-compiled
// kernels.
type realGPU struct {
	g      *driver.GPU
	drv    *driver.Driver
	stream driver.Stream
	async  bool // memory from cuMemAllocAsync
	lt     *cublaslt.Lib
	ltH    cublaslt.Handle
	ws     driver.DevicePtr
	runner *cublaslt.Runner
	comp   *kernels.Compiler

	mu    sync.Mutex
	mods  map[string]driver.Module
	funcs map[string]driver.Function
}

// gemmWorkspace is cuBLASLt's workspace: 32 MiB, what NVIDIA recommends for Hopper.
const gemmWorkspace = 32 << 20

// openRealGPU opens device cfg.Device with everything the backend needs. Missing
// libraries or devices give errors wrapping ErrNoDevice.
func openRealGPU(cfg Config) (*realGPU, error) {
	env := cfg.searchEnv()
	drv, err := driver.Load(env)
	if err != nil {
		return nil, err
	}
	lt, err := cublaslt.Load(env)
	if err != nil {
		return nil, err
	}
	nv, nvErr := nvrtc.Load(env) // without it, kernels come from the cache only
	g, err := drv.OpenGPU(cfg.Device)
	if err != nil {
		return nil, err
	}
	r := &realGPU{g: g, drv: drv, lt: lt, async: g.Props.UsesStreamAllocator,
		mods: map[string]driver.Module{}, funcs: map[string]driver.Function{}}
	release := g.Bind()
	defer release()
	if r.stream, err = drv.NewStream(); err != nil {
		return nil, err
	}
	if r.ltH, err = lt.NewHandle(); err != nil {
		return nil, err
	}
	if r.ws, err = drv.MemAlloc(gemmWorkspace, r.stream, r.async); err != nil {
		return nil, err
	}
	r.runner = lt.NewRunner(r.ltH, r.ws, gemmWorkspace)
	dir := cfg.CacheDir
	if dir == "" {
		dir = DefaultCacheDir()
	}
	if r.comp, err = kernels.NewCompiler(nv, nvErr, g.Props.Arch(), g.Props.Name, dir); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *realGPU) alloc(bytes int64) (driver.DevicePtr, error) {
	return r.drv.MemAlloc(bytes, r.stream, r.async)
}
func (r *realGPU) free(p driver.DevicePtr) error  { return r.drv.MemFree(p, r.stream, r.async) }
func (r *realGPU) memInfo() (int64, int64, error) { return r.drv.MemInfo() }
func (r *realGPU) htod(dst driver.DevicePtr, src []byte) error {
	return r.drv.CopyHtoD(dst, src, r.stream)
}
func (r *realGPU) dtoh(dst []byte, src driver.DevicePtr) error {
	return r.drv.CopyDtoH(dst, src, r.stream)
}
func (r *realGPU) sync() error       { return r.drv.SyncStream(r.stream) }
func (r *realGPU) props() Properties { return r.g.Props }
func (r *realGPU) bind() func()      { return r.g.Bind() }

func (r *realGPU) dtod(dst, src driver.DevicePtr, bytes int64) error {
	return r.drv.CopyDtoD(dst, src, bytes, r.stream)
}

func (r *realGPU) memset(p driver.DevicePtr, size int, v uint32, n int64) error {
	return r.drv.Memset(p, size, v, n, r.stream)
}

func (r *realGPU) gemm(g cublaslt.Gemm, alpha float64, a, b, d, bias, aux driver.DevicePtr) error {
	return r.runner.Run(g, alpha, a, b, d, bias, aux, r.stream)
}

// function returns kernel name of module mod, compiling and loading the module on first
// use.
func (r *realGPU) function(mod, name string) (driver.Function, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	key := mod + "." + name
	if f, ok := r.funcs[key]; ok {
		return f, nil
	}
	m, ok := r.mods[mod]
	if !ok {
		img, err := r.comp.Module(mod)
		if err != nil {
			return 0, err
		}
		if m, err = r.drv.LoadModule(img); err != nil {
			return 0, fmt.Errorf("cuda: load module %s: %w", mod, err)
		}
		r.mods[mod] = m
	}
	f, err := r.drv.Function(m, name)
	if err != nil {
		return 0, err
	}
	r.funcs[key] = f
	return f, nil
}

func (r *realGPU) launch(mod, name string, grid, block [3]uint32, shared int, args *driver.KernelArgs) error {
	f, err := r.function(mod, name)
	if err != nil {
		return err
	}
	if err := r.drv.Launch(f, grid, block, shared, r.stream, args); err != nil {
		return fmt.Errorf("cuda: %s: %w", name, err)
	}
	return nil
}

func (r *realGPU) close() error {
	release := r.bind()
	defer release()
	r.runner.Close()
	errs := []error{r.drv.SyncStream(r.stream), r.lt.DestroyHandle(r.ltH), r.drv.MemFree(r.ws, r.stream, r.async)}
	for _, m := range r.mods {
		errs = append(errs, r.drv.UnloadModule(m))
	}
	errs = append(errs, r.drv.DestroyStream(r.stream), r.g.Close())
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}
