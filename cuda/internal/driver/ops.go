package driver

import (
	"runtime"
	"unsafe"

	"megago/cuda/internal/dl"
)

// Stream, event, memory, module and launch calls of the driver API. The caller has bound
// a context to its thread (GPU.Bind).

// Stream creation flags.
const streamNonBlocking = 1 // CU_STREAM_NON_BLOCKING: no implicit sync with stream 0

// NewStream creates a stream that does not synchronize with the legacy default stream.
func (d *Driver) NewStream() (Stream, error) {
	var s Stream
	err := d.check("cuStreamCreate", d.cuStreamCreate(&s, streamNonBlocking))
	return s, err
}

// DestroyStream destroys s once its work has finished.
func (d *Driver) DestroyStream(s Stream) error {
	return d.check("cuStreamDestroy_v2", d.cuStreamDestroy(s))
}

// SyncStream waits for all work queued on s.
func (d *Driver) SyncStream(s Stream) error {
	return d.check("cuStreamSynchronize", d.cuStreamSynchronize(s))
}

// WaitEvent makes later work on s wait for e.
func (d *Driver) WaitEvent(s Stream, e Event) error {
	return d.check("cuStreamWaitEvent", d.cuStreamWaitEvent(s, e, 0))
}

// NewEvent creates an event that records timing.
func (d *Driver) NewEvent() (Event, error) {
	var e Event
	err := d.check("cuEventCreate", d.cuEventCreate(&e, 0))
	return e, err
}

// cudaErrorNotReady is CUDA_ERROR_NOT_READY: queued work has not finished.
const cudaErrorNotReady = 600

// NewSyncEvent creates an event without timing, for ordering streams and polling.
func (d *Driver) NewSyncEvent() (Event, error) {
	var e Event
	err := d.check("cuEventCreate", d.cuEventCreate(&e, 2)) // CU_EVENT_DISABLE_TIMING
	return e, err
}

// Done reports whether the work before e's last record has finished.
func (d *Driver) Done(e Event) (bool, error) {
	r := d.cuEventQuery(e)
	if r == cudaErrorNotReady {
		return false, nil
	}
	return r == 0, d.check("cuEventQuery", r)
}

// Record records e on s.
func (d *Driver) Record(e Event, s Stream) error {
	return d.check("cuEventRecord", d.cuEventRecord(e, s))
}

// SyncEvent waits for e.
func (d *Driver) SyncEvent(e Event) error {
	return d.check("cuEventSynchronize", d.cuEventSynchronize(e))
}

// Elapsed returns the milliseconds between two recorded events.
func (d *Driver) Elapsed(start, end Event) (float32, error) {
	var ms float32
	err := d.check("cuEventElapsedTime", d.cuEventElapsedTime(&ms, start, end))
	return ms, err
}

// DestroyEvent destroys e.
func (d *Driver) DestroyEvent(e Event) error {
	return d.check("cuEventDestroy_v2", d.cuEventDestroy(e))
}

// MemAlloc allocates bytes of device memory, stream-ordered on s when the device has
// memory pools (cuMemAllocAsync), else with cuMemAlloc.
func (d *Driver) MemAlloc(bytes int64, s Stream, async bool) (DevicePtr, error) {
	var p DevicePtr
	if async {
		return p, d.check("cuMemAllocAsync", d.cuMemAllocAsync(&p, uint64(bytes), s))
	}
	return p, d.check("cuMemAlloc_v2", d.cuMemAlloc(&p, uint64(bytes)))
}

// MemFree frees memory from MemAlloc (with the same async setting).
func (d *Driver) MemFree(p DevicePtr, s Stream, async bool) error {
	if async {
		return d.check("cuMemFreeAsync", d.cuMemFreeAsync(p, s))
	}
	return d.check("cuMemFree_v2", d.cuMemFree(p))
}

// MemInfo returns the device's free and total memory in bytes.
func (d *Driver) MemInfo() (free, total int64, err error) {
	var f, t uint64
	err = d.check("cuMemGetInfo_v2", d.cuMemGetInfo(&f, &t))
	return int64(f), int64(t), err
}

// CopyHtoD copies host bytes to device memory and waits for the copy.
func (d *Driver) CopyHtoD(dst DevicePtr, src []byte, s Stream) error {
	if len(src) == 0 {
		return nil
	}
	if err := d.check("cuMemcpyHtoDAsync_v2", d.cuMemcpyHtoDAsync(dst, unsafe.Pointer(&src[0]), uint64(len(src)), s)); err != nil {
		return err
	}
	err := d.SyncStream(s)
	runtime.KeepAlive(src)
	return err
}

// CopyDtoH copies device memory to host bytes and waits for the copy.
func (d *Driver) CopyDtoH(dst []byte, src DevicePtr, s Stream) error {
	if len(dst) == 0 {
		return nil
	}
	if err := d.check("cuMemcpyDtoHAsync_v2", d.cuMemcpyDtoHAsync(unsafe.Pointer(&dst[0]), src, uint64(len(dst)), s)); err != nil {
		return err
	}
	err := d.SyncStream(s)
	runtime.KeepAlive(dst)
	return err
}

// CopyDtoD queues a device-to-device copy on s.
func (d *Driver) CopyDtoD(dst, src DevicePtr, bytes int64, s Stream) error {
	if bytes == 0 {
		return nil
	}
	return d.check("cuMemcpyDtoDAsync_v2", d.cuMemcpyDtoDAsync(dst, src, uint64(bytes), s))
}

// Memset queues setting n elements of size 1, 2 or 4 bytes at p to the bit pattern v.
func (d *Driver) Memset(p DevicePtr, size int, v uint32, n int64, s Stream) error {
	if n == 0 {
		return nil
	}
	switch size {
	case 1:
		return d.check("cuMemsetD8Async", d.cuMemsetD8Async(p, uint8(v), uint64(n), s))
	case 2:
		return d.check("cuMemsetD16Async", d.cuMemsetD16Async(p, uint16(v), uint64(n), s))
	}
	return d.check("cuMemsetD32Async", d.cuMemsetD32Async(p, v, uint64(n), s))
}

// LoadModule loads a module from PTX (NUL-terminated text) or a CUBIN image.
func (d *Driver) LoadModule(image []byte) (Module, error) {
	var m Module
	img := image
	if len(img) == 0 || img[len(img)-1] != 0 {
		img = append(append([]byte(nil), image...), 0) // PTX must end in NUL; a cubin ignores it
	}
	err := d.check("cuModuleLoadData", d.cuModuleLoadData(&m, unsafe.Pointer(&img[0])))
	runtime.KeepAlive(img)
	return m, err
}

// UnloadModule unloads m.
func (d *Driver) UnloadModule(m Module) error {
	return d.check("cuModuleUnload", d.cuModuleUnload(m))
}

// Function returns the kernel name (an extern "C" name) of m.
func (d *Driver) Function(m Module, name string) (Function, error) {
	var f Function
	err := d.check("cuModuleGetFunction("+name+")", d.cuModuleGetFunction(&f, m, name))
	return f, err
}

// funcAttrMaxDynamicShared is CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES.
const funcAttrMaxDynamicShared = 8

// SetMaxDynamicShared lets f use up to bytes of dynamic shared memory (above 48 KiB a
// kernel must opt in).
func (d *Driver) SetMaxDynamicShared(f Function, bytes int) error {
	return d.check("cuFuncSetAttribute", d.cuFuncSetAttribute(f, funcAttrMaxDynamicShared, int32(bytes)))
}

// Launch queues kernel f on s with the given grid and block sizes, dynamic shared memory
// and arguments.
func (d *Driver) Launch(f Function, grid, block [3]uint32, shared int, s Stream, args *KernelArgs) error {
	r := d.cuLaunchKernel(f, grid[0], grid[1], grid[2], block[0], block[1], block[2], uint32(shared), s, args.Params(), nil)
	runtime.KeepAlive(args)
	return d.check("cuLaunchKernel", r)
}

// HasGraphs reports whether the driver has the CUDA graph calls (CUDA ≥ 11.4).
func (d *Driver) HasGraphs() bool { return d.graphs }

// Graph is an instantiated CUDA graph captured from a stream.
type Graph struct {
	graph, exec uintptr
}

// Capture records the work fn queues on s into a graph instead of running it (global
// capture mode), and instantiates it. It fails if the driver lacks graphs.
func (d *Driver) Capture(s Stream, fn func() error) (*Graph, error) {
	if !d.graphs {
		return nil, &dl.Error{Lib: "driver", Func: "cuStreamBeginCapture_v2", Msg: "CUDA graphs need a driver for CUDA 11.4 or newer"}
	}
	if err := d.check("cuStreamBeginCapture_v2", d.cuStreamBeginCapture(s, 0)); err != nil {
		return nil, err
	}
	ferr := fn()
	g := &Graph{}
	if err := d.check("cuStreamEndCapture", d.cuStreamEndCapture(s, &g.graph)); err != nil {
		return nil, err
	}
	if ferr != nil {
		d.cuGraphDestroy(g.graph)
		return nil, ferr
	}
	if err := d.check("cuGraphInstantiateWithFlags", d.cuGraphInstantiateWithFlags(&g.exec, g.graph, 0)); err != nil {
		d.cuGraphDestroy(g.graph)
		return nil, err
	}
	return g, nil
}

// LaunchGraph queues g on s.
func (d *Driver) LaunchGraph(g *Graph, s Stream) error {
	return d.check("cuGraphLaunch", d.cuGraphLaunch(g.exec, s))
}

// DestroyGraph frees g.
func (d *Driver) DestroyGraph(g *Graph) error {
	if err := d.check("cuGraphExecDestroy", d.cuGraphExecDestroy(g.exec)); err != nil {
		return err
	}
	return d.check("cuGraphDestroy", d.cuGraphDestroy(g.graph))
}
