package driver

import (
	"fmt"
	"runtime"
	"unsafe"

	"megago/cuda/internal/dl"
)

// cuResult is the driver API's CUresult.
type cuResult int32

// Handles of the driver API, opaque to Go.
type (
	// DevicePtr is an address in device memory (CUdeviceptr).
	DevicePtr uintptr
	// Stream is a CUDA stream (CUstream); 0 is the legacy default stream.
	Stream uintptr
	// Event is a CUDA event (CUevent).
	Event uintptr
	// Module is a loaded module of kernels (CUmodule).
	Module uintptr
	// Function is a kernel of a module (CUfunction).
	Function uintptr
)

// Driver is the CUDA driver API (libcuda), opened with Load. Its methods are thin
// wrappers that turn result codes into *Error values; the calling OS thread must have a
// context current (GPU.Bind) for every method but Init, Version and the device queries.
type Driver struct {
	lib *dl.Lib

	cuInit                    func(flags uint32) cuResult
	cuDriverGetVersion        func(v *int32) cuResult
	cuGetErrorName            func(r cuResult, s **byte) cuResult
	cuGetErrorString          func(r cuResult, s **byte) cuResult
	cuDeviceGetCount          func(n *int32) cuResult
	cuDeviceGet               func(d *int32, ordinal int32) cuResult
	cuDeviceGetName           func(name *byte, n int32, d int32) cuResult
	cuDeviceTotalMem          func(bytes *uint64, d int32) cuResult
	cuDeviceGetAttribute      func(v *int32, attr int32, d int32) cuResult
	cuDevicePrimaryCtxRetain  func(ctx *uintptr, d int32) cuResult
	cuDevicePrimaryCtxRelease func(d int32) cuResult
	cuCtxSetCurrent           func(ctx uintptr) cuResult
	cuCtxSynchronize          func() cuResult
	cuStreamCreate            func(s *Stream, flags uint32) cuResult
	cuStreamDestroy           func(s Stream) cuResult
	cuStreamSynchronize       func(s Stream) cuResult
	cuStreamWaitEvent         func(s Stream, e Event, flags uint32) cuResult
	cuEventCreate             func(e *Event, flags uint32) cuResult
	cuEventRecord             func(e Event, s Stream) cuResult
	cuEventSynchronize        func(e Event) cuResult
	cuEventQuery              func(e Event) cuResult
	cuEventElapsedTime        func(ms *float32, start, end Event) cuResult
	cuEventDestroy            func(e Event) cuResult
	cuMemAlloc                func(p *DevicePtr, bytes uint64) cuResult
	cuMemFree                 func(p DevicePtr) cuResult
	cuMemAllocAsync           func(p *DevicePtr, bytes uint64, s Stream) cuResult // CUDA ≥ 11.2
	cuMemFreeAsync            func(p DevicePtr, s Stream) cuResult
	cuMemGetInfo              func(free, total *uint64) cuResult
	cuMemcpyHtoDAsync         func(dst DevicePtr, src unsafe.Pointer, bytes uint64, s Stream) cuResult
	cuMemcpyDtoHAsync         func(dst unsafe.Pointer, src DevicePtr, bytes uint64, s Stream) cuResult
	cuMemcpyDtoDAsync         func(dst, src DevicePtr, bytes uint64, s Stream) cuResult
	cuMemsetD8Async           func(p DevicePtr, v uint8, n uint64, s Stream) cuResult
	cuMemsetD16Async          func(p DevicePtr, v uint16, n uint64, s Stream) cuResult
	cuMemsetD32Async          func(p DevicePtr, v uint32, n uint64, s Stream) cuResult
	cuModuleLoadData          func(m *Module, image unsafe.Pointer) cuResult
	cuModuleUnload            func(m Module) cuResult
	cuModuleGetFunction       func(f *Function, m Module, name string) cuResult
	cuFuncSetAttribute        func(f Function, attr int32, v int32) cuResult
	cuLaunchKernel            func(f Function, gx, gy, gz, bx, by, bz, shmem uint32, s Stream, params, extra unsafe.Pointer) cuResult

	graphs                      bool // the CUDA graph functions below are bound
	cuStreamBeginCapture        func(s Stream, mode int32) cuResult
	cuStreamEndCapture          func(s Stream, g *uintptr) cuResult
	cuGraphInstantiateWithFlags func(exec *uintptr, g uintptr, flags uint64) cuResult
	cuGraphLaunch               func(exec uintptr, s Stream) cuResult
	cuGraphExecDestroy          func(exec uintptr) cuResult
	cuGraphDestroy              func(g uintptr) cuResult
}

// Load opens libcuda (see dl.Library.Dirs for where it is looked for), binds the driver
// API and initializes it. Without a usable driver or device the error wraps
// dl.ErrNoDevice.
func Load(env dl.SearchEnv) (*Driver, error) {
	lib, err := dl.LibDriver.Open(env)
	if err != nil {
		return nil, err
	}
	d := &Driver{lib: lib}
	b := dl.NewBinder(lib)
	b.Bind(&d.cuInit, "cuInit")
	b.Bind(&d.cuDriverGetVersion, "cuDriverGetVersion")
	b.Bind(&d.cuGetErrorName, "cuGetErrorName")
	b.Bind(&d.cuGetErrorString, "cuGetErrorString")
	b.Bind(&d.cuDeviceGetCount, "cuDeviceGetCount")
	b.Bind(&d.cuDeviceGet, "cuDeviceGet")
	b.Bind(&d.cuDeviceGetName, "cuDeviceGetName")
	b.Bind(&d.cuDeviceTotalMem, "cuDeviceTotalMem_v2")
	b.Bind(&d.cuDeviceGetAttribute, "cuDeviceGetAttribute")
	b.Bind(&d.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain")
	b.Bind(&d.cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2")
	b.Bind(&d.cuCtxSetCurrent, "cuCtxSetCurrent")
	b.Bind(&d.cuCtxSynchronize, "cuCtxSynchronize")
	b.Bind(&d.cuStreamCreate, "cuStreamCreate")
	b.Bind(&d.cuStreamDestroy, "cuStreamDestroy_v2")
	b.Bind(&d.cuStreamSynchronize, "cuStreamSynchronize")
	b.Bind(&d.cuStreamWaitEvent, "cuStreamWaitEvent")
	b.Bind(&d.cuEventCreate, "cuEventCreate")
	b.Bind(&d.cuEventRecord, "cuEventRecord")
	b.Bind(&d.cuEventSynchronize, "cuEventSynchronize")
	b.Bind(&d.cuEventQuery, "cuEventQuery")
	b.Bind(&d.cuEventElapsedTime, "cuEventElapsedTime")
	b.Bind(&d.cuEventDestroy, "cuEventDestroy_v2")
	b.Bind(&d.cuMemAlloc, "cuMemAlloc_v2")
	b.Bind(&d.cuMemFree, "cuMemFree_v2")
	b.Optional(&d.cuMemAllocAsync, "cuMemAllocAsync")
	b.Optional(&d.cuMemFreeAsync, "cuMemFreeAsync")
	b.Bind(&d.cuMemGetInfo, "cuMemGetInfo_v2")
	b.Bind(&d.cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2")
	b.Bind(&d.cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2")
	b.Bind(&d.cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2")
	b.Bind(&d.cuMemsetD8Async, "cuMemsetD8Async")
	b.Bind(&d.cuMemsetD16Async, "cuMemsetD16Async")
	b.Bind(&d.cuMemsetD32Async, "cuMemsetD32Async")
	b.Bind(&d.cuModuleLoadData, "cuModuleLoadData")
	b.Bind(&d.cuModuleUnload, "cuModuleUnload")
	b.Bind(&d.cuModuleGetFunction, "cuModuleGetFunction")
	b.Bind(&d.cuFuncSetAttribute, "cuFuncSetAttribute")
	b.Bind(&d.cuLaunchKernel, "cuLaunchKernel")
	d.graphs = b.Optional(&d.cuStreamBeginCapture, "cuStreamBeginCapture_v2") &&
		b.Optional(&d.cuStreamEndCapture, "cuStreamEndCapture") &&
		b.Optional(&d.cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags") &&
		b.Optional(&d.cuGraphLaunch, "cuGraphLaunch") &&
		b.Optional(&d.cuGraphExecDestroy, "cuGraphExecDestroy") &&
		b.Optional(&d.cuGraphDestroy, "cuGraphDestroy")
	if err := b.Err(dl.LibDriver); err != nil {
		return nil, err
	}
	if err := d.check("cuInit", d.cuInit(0)); err != nil {
		return nil, err
	}
	return d, nil
}

// Path returns the file the driver library was opened from.
func (d *Driver) Path() string { return d.lib.Path() }

// check turns a driver result into nil or an *Error with CUDA's name and text for it.
func (d *Driver) check(fn string, r cuResult) error {
	if r == 0 {
		return nil
	}
	e := &dl.Error{Lib: "driver", Func: fn, Code: int(r)}
	var s *byte
	if d.cuGetErrorName(r, &s) == 0 {
		e.Name = cString(s)
	}
	if d.cuGetErrorString(r, &s) == 0 {
		e.Msg = cString(s)
	}
	return e
}

// cString copies a NUL-terminated C string.
func cString(p *byte) string {
	if p == nil {
		return ""
	}
	n := 0
	for *(*byte)(unsafe.Add(unsafe.Pointer(p), n)) != 0 {
		n++
	}
	return string(unsafe.Slice(p, n))
}

// Version returns the CUDA version the driver supports, e.g. 12040 for 12.4.
func (d *Driver) Version() (int, error) {
	var v int32
	err := d.check("cuDriverGetVersion", d.cuDriverGetVersion(&v))
	return int(v), err
}

// DeviceCount returns the number of visible devices.
func (d *Driver) DeviceCount() (int, error) {
	var n int32
	err := d.check("cuDeviceGetCount", d.cuDeviceGetCount(&n))
	return int(n), err
}

// Device attributes (CUdevice_attribute).
const (
	attrMaxThreadsPerBlock         = 1
	attrMultiprocessorCount        = 16
	attrComputeCapabilityMajor     = 75
	attrComputeCapabilityMinor     = 76
	attrMaxSharedMemoryPerBlockOpt = 97
	attrMemoryPoolsSupported       = 115
	attrClockRate                  = 13 // kHz
)

// Properties describes a device.
type Properties struct {
	Name                string
	Major, Minor        int   // compute capability
	SMs                 int   // multiprocessors
	TotalMem            int64 // bytes
	MaxThreadsPerBlock  int
	MaxSharedPerBlock   int // bytes a block may opt in to
	MemoryPools         bool
	ClockKHz            int
	Ordinal             int
	DriverVersion       int
	UsesStreamAllocator bool // cuMemAllocAsync is used
}

// Arch returns the compute capability as NVRTC spells it, e.g. 90 for sm_90.
func (p Properties) Arch() int { return 10*p.Major + p.Minor }

// DeviceProperties queries device ordinal.
func (d *Driver) DeviceProperties(ordinal int) (Properties, error) {
	var dev int32
	if err := d.check("cuDeviceGet", d.cuDeviceGet(&dev, int32(ordinal))); err != nil {
		return Properties{}, err
	}
	p := Properties{Ordinal: ordinal}
	name := make([]byte, 256)
	if err := d.check("cuDeviceGetName", d.cuDeviceGetName(&name[0], int32(len(name)), dev)); err != nil {
		return p, err
	}
	p.Name = cString(&name[0])
	var mem uint64
	if err := d.check("cuDeviceTotalMem_v2", d.cuDeviceTotalMem(&mem, dev)); err != nil {
		return p, err
	}
	p.TotalMem = int64(mem)
	attrs := []struct {
		attr int32
		dst  *int
	}{
		{attrComputeCapabilityMajor, &p.Major}, {attrComputeCapabilityMinor, &p.Minor},
		{attrMultiprocessorCount, &p.SMs}, {attrMaxThreadsPerBlock, &p.MaxThreadsPerBlock},
		{attrMaxSharedMemoryPerBlockOpt, &p.MaxSharedPerBlock}, {attrClockRate, &p.ClockKHz},
	}
	for _, a := range attrs {
		var v int32
		if err := d.check("cuDeviceGetAttribute", d.cuDeviceGetAttribute(&v, a.attr, dev)); err != nil {
			return p, err
		}
		*a.dst = int(v)
	}
	var pools int32
	if d.cuDeviceGetAttribute(&pools, attrMemoryPoolsSupported, dev) == 0 {
		p.MemoryPools = pools != 0
	}
	p.UsesStreamAllocator = p.MemoryPools && d.cuMemAllocAsync != nil && d.cuMemFreeAsync != nil
	var err error
	p.DriverVersion, err = d.Version()
	return p, err
}

// GPU is one device with its primary context retained.
type GPU struct {
	Driver *Driver
	Props  Properties
	dev    int32
	ctx    uintptr
}

// OpenGPU retains the primary context of device ordinal. It returns an error wrapping
// dl.ErrNoDevice when there is no such device.
func (d *Driver) OpenGPU(ordinal int) (*GPU, error) {
	n, err := d.DeviceCount()
	if err != nil {
		return nil, err
	}
	if ordinal < 0 || ordinal >= n {
		return nil, fmt.Errorf("cuda: device %d requested, %d visible: %w", ordinal, n, dl.ErrNoDevice)
	}
	props, err := d.DeviceProperties(ordinal)
	if err != nil {
		return nil, err
	}
	g := &GPU{Driver: d, Props: props}
	if err := d.check("cuDeviceGet", d.cuDeviceGet(&g.dev, int32(ordinal))); err != nil {
		return nil, err
	}
	if err := d.check("cuDevicePrimaryCtxRetain", d.cuDevicePrimaryCtxRetain(&g.ctx, g.dev)); err != nil {
		return nil, err
	}
	return g, nil
}

// Close releases the primary context.
func (g *GPU) Close() error {
	return g.Driver.check("cuDevicePrimaryCtxRelease_v2", g.Driver.cuDevicePrimaryCtxRelease(g.dev))
}

// Bind makes g's context current on the calling goroutine's OS thread, which it locks to
// the goroutine until the returned function is called. Every driver call on g's
// resources runs between a Bind and its release: Go moves goroutines between threads,
// and CUDA's current context belongs to a thread.
func (g *GPU) Bind() (release func()) {
	runtime.LockOSThread()
	if err := g.Driver.check("cuCtxSetCurrent", g.Driver.cuCtxSetCurrent(g.ctx)); err != nil {
		runtime.UnlockOSThread()
		panic(err)
	}
	return runtime.UnlockOSThread
}

// Synchronize waits for all work on the device's context.
func (g *GPU) Synchronize() error {
	return g.Driver.check("cuCtxSynchronize", g.Driver.cuCtxSynchronize())
}
