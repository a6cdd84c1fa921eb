package driver

import (
	"math"
	"unsafe"
)

// KernelArgs packs a kernel's arguments the way cuLaunchKernel takes them: an array of
// pointers, one to each argument's value. Every value starts its own 8-byte-aligned slot
// (a struct passed by value takes as many slots as it needs), so a 4-byte value is read
// from the low half of its slot, as the little-endian ABI expects.
type KernelArgs struct {
	data  []uint64 // the slots
	first []int    // first slot of each argument
	ptrs  []unsafe.Pointer
}

// NewKernelArgs returns an empty argument list.
func NewKernelArgs() *KernelArgs { return &KernelArgs{} }

func (a *KernelArgs) add(words ...uint64) *KernelArgs {
	a.first = append(a.first, len(a.data))
	a.data = append(a.data, words...)
	a.ptrs = a.ptrs[:0]
	for _, f := range a.first {
		a.ptrs = append(a.ptrs, unsafe.Pointer(&a.data[f]))
	}
	return a
}

// Ptr appends a device pointer.
func (a *KernelArgs) Ptr(p DevicePtr) *KernelArgs { return a.add(uint64(p)) }

// I32 appends an int.
func (a *KernelArgs) I32(v int32) *KernelArgs { return a.add(uint64(uint32(v))) }

// U32 appends an unsigned int.
func (a *KernelArgs) U32(v uint32) *KernelArgs { return a.add(uint64(v)) }

// I64 appends a long long.
func (a *KernelArgs) I64(v int64) *KernelArgs { return a.add(uint64(v)) }

// F32 appends a float.
func (a *KernelArgs) F32(v float32) *KernelArgs { return a.add(uint64(math.Float32bits(v))) }

// F64 appends a double.
func (a *KernelArgs) F64(v float64) *KernelArgs { return a.add(math.Float64bits(v)) }

// Bytes appends a struct passed by value, given as its bytes in the kernel's layout.
func (a *KernelArgs) Bytes(b []byte) *KernelArgs {
	words := make([]uint64, (len(b)+7)/8)
	copy(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(words))), len(words)*8), b)
	return a.add(words...)
}

// Params returns the array of pointers cuLaunchKernel takes (nil without arguments). It
// is valid until the next argument is appended; the caller keeps a reachable
// (runtime.KeepAlive) until the launch that reads it has returned.
func (a *KernelArgs) Params() unsafe.Pointer {
	if a == nil || len(a.ptrs) == 0 {
		return nil
	}
	return unsafe.Pointer(&a.ptrs[0])
}

// Len returns the number of arguments.
func (a *KernelArgs) Len() int { return len(a.first) }

// bytesAt returns n bytes of argument i's value, for tests.
func (a *KernelArgs) bytesAt(i, n int) []byte {
	return unsafe.Slice((*byte)(a.ptrs[i]), n)
}

// uintptrOf returns the address of argument i, for tests.
func uintptrOf(a *KernelArgs, i int) uintptr { return uintptr(a.ptrs[i]) }
