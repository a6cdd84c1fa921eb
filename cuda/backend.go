package cuda

import (
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"

	"megago/cuda/internal/driver"
	"megago/tensor"
)

// Name is the name the backend is registered under with package tensor.
const Name = "cuda"

func init() {
	tensor.Register(Name, func() (tensor.Backend, error) {
		b, err := Open(Config{Device: AutoDevice})
		if err != nil {
			return nil, err // not a typed nil inside the interface
		}
		return b, nil
	})
}

// AutoDevice as Config.Device picks device LOCAL_RANK (or Slurm's SLURM_LOCALID) mod the
// number of visible devices (device 0 without either): one GPU per local rank under
// `megago launch`, torchrun or srun, and the only one when the launcher narrowed
// CUDA_VISIBLE_DEVICES.
const AutoDevice = -1

// Config configures Open. The zero value opens device 0 with the defaults.
type Config struct {
	Device    int       // ordinal, or AutoDevice
	CacheDir  string    // compiled kernels; "" means DefaultCacheDir()
	AllowTF32 bool      // float32 matrix products on TF32 tensor cores (10-bit mantissa inputs)
	Poison    bool      // fill storage returned to the tensor pool with 0xFF bytes (NaN)
	Search    SearchEnv // where to look for the libraries; zero means DefaultSearchEnv()
}

// searchEnv returns cfg.Search, or DefaultSearchEnv() for the zero value.
func (cfg Config) searchEnv() SearchEnv {
	if cfg.Search.Getenv == nil {
		return DefaultSearchEnv()
	}
	return cfg.Search
}

// Backend is the CUDA implementation of tensor.Backend: storage in device memory from a
// caching allocator, every op a kernel (internal/kernels/*.cu) or a cuBLASLt GEMM,
// queued on one stream. Methods panic with an error value (*Error, *OutOfMemoryError,
// *IndexError) when the device fails, since tensor.Backend's methods return nothing;
// training entry points recover such panics into errors.
type Backend struct {
	dev       gpu
	alloc     *allocator
	cfg       Config
	maxBlocks int

	errMu   sync.Mutex
	errFlag driver.DevicePtr // prelude.cu's ErrFlag
	pending bool             // a kernel that reports bad indices ran since the last check

	// fallbacks counts the fused kernels run on the host (host_fallback.go), for tests.
	fallbacks atomic.Int64

	// nccl loads NCCL on the first NewComm on this backend, from Config.Search.
	nccl func() (ncclAPI, error)
}

// devBuf is a Backend's tensor.Buffer.
type devBuf struct {
	ptr   driver.DevicePtr
	dt    tensor.DType
	n     int
	freed bool
}

// Open opens a CUDA device as a tensor backend. Without a usable GPU or libraries the
// error wraps ErrNoDevice and lists what was tried.
//
// With MEGAGO_CUDA_EMU=1 (EnvEmulator) in the environment (Config.Search's), it opens
// the kernel emulator instead, whatever the machine has (see the package doc), building
// it with g++ into the cache first if needed; a failed build is an error quoting the
// compiler's output.
func Open(cfg Config) (*Backend, error) {
	if emulated(cfg.searchEnv()) {
		return openEmulator(cfg)
	}
	if cfg.Device == AutoDevice {
		d, err := autoDevice(cfg.searchEnv())
		if err != nil {
			return nil, err
		}
		cfg.Device = d
	}
	dev, err := openRealGPU(cfg)
	if err != nil {
		return nil, err
	}
	return newBackend(dev, cfg)
}

// autoDevice returns the local rank (localRank) mod the device count.
func autoDevice(env SearchEnv) (int, error) {
	lr, ok := localRank(env.Getenv)
	if !ok {
		return 0, nil
	}
	drv, err := driver.Load(env)
	if err != nil {
		return 0, err
	}
	n, err := drv.DeviceCount()
	if err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, fmt.Errorf("cuda: no device visible: %w", ErrNoDevice)
	}
	return lr % n, nil
}

// localRank returns this process's rank on its node as launchers set it: LOCAL_RANK
// (megago launch, torchrun), else SLURM_LOCALID (srun), as parallel/tcp reads them; ok is
// false when neither holds a rank.
func localRank(getenv func(string) string) (rank int, ok bool) {
	for _, name := range []string{"LOCAL_RANK", "SLURM_LOCALID"} {
		if v := getenv(name); v != "" {
			r, err := strconv.Atoi(v)
			return r, err == nil && r >= 0
		}
	}
	return 0, false
}

// newBackend wraps an opened device.
func newBackend(dev gpu, cfg Config) (*Backend, error) {
	p := dev.props()
	b := &Backend{dev: dev, cfg: cfg, maxBlocks: max(1, p.SMs) * 32,
		alloc: newAllocator(dev, fmt.Sprintf("device %d (%s)", p.Ordinal, p.Name)),
		nccl:  sync.OnceValues(func() (ncclAPI, error) { return loadNCCL(dev, cfg.searchEnv()) })}
	release := dev.bind()
	defer release()
	var err error
	if b.errFlag, err = b.alloc.get(errFlagBytes); err != nil {
		return nil, err
	}
	if err := dev.memset(b.errFlag, 1, 0, errFlagBytes); err != nil {
		return nil, err
	}
	return b, nil
}

// Properties returns the device's properties.
func (b *Backend) Properties() Properties { return b.dev.props() }

// MemStats returns the allocator's statistics.
func (b *Backend) MemStats() MemStats { return b.alloc.Stats() }

// ResetPeak sets MemStats().Peak to the memory allocated now.
func (b *Backend) ResetPeak() { b.alloc.resetPeak() }

// EmptyCache gives the allocator's cached blocks back to the driver. (Blocks cached by a
// tensor.Device's pool are released with Device.EmptyCache first.)
func (b *Backend) EmptyCache() {
	release := b.dev.bind()
	defer release()
	b.alloc.emptyCache()
}

// Sync waits for every operation queued on the stream (tensor.Backend's Sync). It panics
// with the device's error (*Error) when one failed, and with an *IndexError when a
// kernel met a bad index since the last check.
func (b *Backend) Sync() {
	release := b.dev.bind()
	defer release()
	b.must(b.dev.sync())
	b.checkErrors()
}

// Close waits for the device and releases it. The backend must not be used afterwards.
func (b *Backend) Close() error {
	release := b.dev.bind()
	b.alloc.put(b.errFlag)
	b.alloc.emptyCache()
	release()
	return b.dev.close()
}

// must panics with err, the backend's way to report device failures.
func (b *Backend) must(err error) {
	if err != nil {
		panic(err)
	}
}

// Name returns "cuda".
func (b *Backend) Name() string { return Name }

// Alloc returns device storage for n elements of dt. It panics with an
// *OutOfMemoryError when the device is full.
func (b *Backend) Alloc(dt tensor.DType, n int) tensor.Buffer {
	release := b.dev.bind()
	defer release()
	p, err := b.alloc.get(int64(max(n, 1) * dt.Size()))
	b.must(err)
	return &devBuf{ptr: p, dt: dt, n: n}
}

// Free returns the storage to the allocator's cache.
func (b *Backend) Free(buf tensor.Buffer) {
	d := b.buf("Free", buf)
	d.freed = true
	b.alloc.put(d.ptr)
}

// Poison fills released storage with 0xFF bytes when Config.Poison is set.
func (b *Backend) Poison(buf tensor.Buffer, dt tensor.DType, n int) {
	if !b.cfg.Poison || n == 0 {
		return
	}
	release := b.dev.bind()
	defer release()
	b.must(b.dev.memset(b.buf("Poison", buf).ptr, 1, 0xff, int64(n*dt.Size())))
}

// buf returns the device buffer behind a tensor.Buffer. It panics on a foreign or freed
// buffer.
func (b *Backend) buf(op string, buf tensor.Buffer) *devBuf {
	d, ok := buf.(*devBuf)
	if !ok || d == nil {
		panic(fmt.Sprintf("cuda: %s: buffer of type %T is not CUDA storage", op, buf))
	}
	if d.freed {
		panic(fmt.Sprintf("cuda: %s: use of freed storage at %#x", op, uintptr(d.ptr)))
	}
	return d
}

// ptr returns the device address of span s's first element, or 0 for an empty span.
func (b *Backend) ptr(op string, s tensor.Span) driver.DevicePtr {
	if s.Empty() {
		return 0
	}
	d := b.buf(op, s.Buf)
	if s.Off < 0 || s.Off+s.Numel() > d.n || s.DType.Size() != d.dt.Size() {
		panic(fmt.Sprintf("cuda: %s: %v span [%d, %d) of a buffer of %d %v", op, s.DType, s.Off, s.Off+s.Numel(), d.n, d.dt))
	}
	return d.ptr + driver.DevicePtr(s.Off*s.DType.Size())
}

// WriteHost copies host bytes into dst.
func (b *Backend) WriteHost(dst tensor.Span, src []byte) {
	release := b.dev.bind()
	defer release()
	if want := dst.Numel() * dst.DType.Size(); len(src) != want {
		panic(fmt.Sprintf("cuda: WriteHost: %d bytes for %d×%v", len(src), dst.Numel(), dst.DType))
	}
	b.must(b.dev.htod(b.ptr("WriteHost", dst), src))
}

// ReadHost copies src's elements to host bytes, after the work queued before it, and
// panics with an *IndexError if a kernel met a bad index since the last check.
func (b *Backend) ReadHost(src tensor.Span, dst []byte) {
	release := b.dev.bind()
	defer release()
	if want := src.Numel() * src.DType.Size(); len(dst) != want {
		panic(fmt.Sprintf("cuda: ReadHost: %d bytes for %d×%v", len(dst), src.Numel(), src.DType))
	}
	b.must(b.dev.dtoh(dst, b.ptr("ReadHost", src)))
	b.checkErrors()
}

// hostBits returns the bit pattern of v in dtype dt, rounded as the CPU backend's Fill
// rounds it.
func hostBits(dt tensor.DType, v float64) uint64 {
	switch dt {
	case tensor.F64:
		return math.Float64bits(v)
	case tensor.F32:
		return uint64(math.Float32bits(float32(v)))
	case tensor.BF16:
		return uint64(tensor.BF16FromFloat64(v))
	case tensor.F16:
		return uint64(tensor.F16FromFloat64(v))
	case tensor.I32:
		return uint64(uint32(int32(v)))
	}
	return uint64(int64(v))
}

// Fill sets every element of dst to v.
func (b *Backend) Fill(dst tensor.Span, v float64) {
	release := b.dev.bind()
	defer release()
	n := int64(dst.Numel())
	if n == 0 {
		return
	}
	p, bits := b.ptr("Fill", dst), hostBits(dst.DType, v)
	if sz := dst.DType.Size(); sz < 8 {
		b.must(b.dev.memset(p, sz, uint32(bits), n))
		return
	}
	b.run("elementwise", "fill64", n, driver.NewKernelArgs().Ptr(p).I64(int64(bits)).I64(n))
}

// run launches a grid-stride kernel over n elements.
func (b *Backend) run(mod, name string, n int64, args *driver.KernelArgs) {
	if n == 0 {
		return
	}
	grid := gridFor(n, b.maxBlocks)
	b.must(b.dev.launch(mod, name, [3]uint32{grid, 1, 1}, [3]uint32{blockSize, 1, 1}, 0, args))
}

// runRows launches a kernel with one block per row (grid-stride over rows) of rowLen
// elements each.
func (b *Backend) runRows(mod, name string, rows, rowLen int64, args *driver.KernelArgs) {
	if rows == 0 {
		return
	}
	grid := uint32(min(rows, int64(b.maxBlocks)))
	b.must(b.dev.launch(mod, name, [3]uint32{grid, 1, 1}, [3]uint32{rowBlock(rowLen), 1, 1}, 0, args))
}

// dtArg returns a dtype as the kernels' int argument (tensor.DType's number).
func dtArg(dt tensor.DType) int32 { return int32(dt) }

// computeSuffix returns the kernel variant computing in dt's compute type: "_d" for
// float64 (F64 and integers), "_f" for float32.
func computeSuffix(dt tensor.DType) string {
	if dt.Compute() == tensor.F64 {
		return "_d"
	}
	return "_f"
}

// The Backend implements the tensor interfaces.
var (
	_ tensor.Backend  = (*Backend)(nil)
	_ tensor.Poisoner = (*Backend)(nil)
)
