package transport

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"

	"megago/tensor"
)

// Host-side helpers of the transports that move bytes: reading a tensor into host bytes,
// writing it back, and reducing byte buffers element by element. Buffers hold elements as
// little-endian bytes, as the wire does.

// HostBytes returns a copy of t's elements as little-endian bytes.
func HostBytes(t *tensor.Tensor) []byte {
	b := make([]byte, t.Numel()*t.DType().Size())
	t.Device().Backend().ReadHost(t.Span(), b)
	return b
}

// WriteHost copies host bytes into t.
func WriteHost(t *tensor.Tensor, b []byte) { t.Device().Backend().WriteHost(t.Span(), b) }

// Op is parallel.Op, value for value: a reduction.
type Op uint8

// Reductions, as in parallel.
const (
	Sum Op = iota + 1
	Max
	Min
	Avg
)

// Reduce sets dst = a ⊕ x element-wise for elements of dtype dt, where ⊕ is op's
// combining step: addition for Sum and Avg (Finish divides at the end), the larger or
// the smaller for Max and Min, NaN winning both, as in PyTorch. BF16 and F16 are widened
// to float32, combined and rounded back, so a chain of reductions rounds after each step
// (as a ring does on the wire). dst may be a or x (the same bytes, not a shifted overlap).
//
// It panics if the three lengths differ or dt is not a numeric dtype.
func Reduce(dt tensor.DType, op Op, dst, a, x []byte) {
	if len(a) != len(x) || len(dst) != len(x) {
		panic(fmt.Sprintf("parallel: reduce: %d bytes with %d into %d", len(a), len(x), len(dst)))
	}
	if op == Avg {
		op = Sum
	}
	switch dt {
	case tensor.F64:
		reduceFloat[float64](op, dst, a, x)
	case tensor.F32:
		reduceFloat[float32](op, dst, a, x)
	case tensor.BF16:
		reduceHalf(true, op, dst, a, x)
	case tensor.F16:
		reduceHalf(false, op, dst, a, x)
	case tensor.I32:
		reduceInt[int32](op, dst, a, x)
	case tensor.I64:
		reduceInt[int64](op, dst, a, x)
	default:
		panic(fmt.Sprintf("parallel: reduce: unknown dtype %v", dt))
	}
}

// Finish completes a reduction of n contributions in acc: Avg divides the sum by n
// (integer division for integer dtypes, rounding to the dtype for the others); the
// other ops leave acc as it is.
func Finish(dt tensor.DType, op Op, acc []byte, n int) {
	if op != Avg {
		return
	}
	switch dt {
	case tensor.F64:
		divideFloat[float64](acc, n)
	case tensor.F32:
		divideFloat[float32](acc, n)
	case tensor.BF16:
		divideHalf(true, acc, n)
	case tensor.F16:
		divideHalf(false, acc, n)
	case tensor.I32:
		divideInt[int32](acc, n)
	case tensor.I64:
		divideInt[int64](acc, n)
	}
}

var le = binary.LittleEndian

// float is an element type that combines and is stored as itself.
type float interface{ float32 | float64 }

// loadFloat returns the little-endian T at the start of b.
func loadFloat[T float](b []byte) T {
	if unsafe.Sizeof(T(0)) == 4 {
		return T(math.Float32frombits(le.Uint32(b)))
	}
	return T(math.Float64frombits(le.Uint64(b)))
}

// storeFloat writes v at the start of b, little-endian.
func storeFloat[T float](b []byte, v T) {
	if unsafe.Sizeof(v) == 4 {
		le.PutUint32(b, math.Float32bits(float32(v)))
		return
	}
	le.PutUint64(b, math.Float64bits(float64(v)))
}

// reduceFloat is Reduce for float32 or float64 elements; op is not Avg.
func reduceFloat[T float](op Op, dst, a, x []byte) {
	if op == Sum && sumAligned[T](dst, a, x) {
		return
	}
	sz := int(unsafe.Sizeof(T(0)))
	for i := 0; i < len(a); i += sz {
		storeFloat(dst[i:], combineFloat(op, loadFloat[T](a[i:]), loadFloat[T](x[i:])))
	}
}

// divideFloat divides every float32 or float64 element of acc by n.
func divideFloat[T float](acc []byte, n int) {
	sz := int(unsafe.Sizeof(T(0)))
	for i := 0; i < len(acc); i += sz {
		storeFloat(acc[i:], loadFloat[T](acc[i:])/T(n))
	}
}

// sumAligned sets dst = a + x viewed as slices of T, on little-endian machines where all
// three are aligned for T; it reports whether it did. The result is the same as the
// byte-wise loop's.
func sumAligned[T float](dst, a, x []byte) bool {
	if !littleEndian || len(a) == 0 {
		return false
	}
	d, ok1 := view[T](dst)
	u, ok2 := view[T](a)
	v, ok3 := view[T](x)
	if !ok1 || !ok2 || !ok3 {
		return false
	}
	u, v = u[:len(d)], v[:len(d)]
	for i := range d {
		d[i] = u[i] + v[i]
	}
	return true
}

// view views b as a slice of T if it is aligned for T.
func view[T float](b []byte) ([]T, bool) {
	sz := int(unsafe.Sizeof(T(0)))
	if uintptr(unsafe.Pointer(&b[0]))%uintptr(sz) != 0 {
		return nil, false
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), len(b)/sz), true
}

// littleEndian reports whether the machine stores integers little-endian, as the wire
// format does.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// widenHalf returns the BF16 (bf) or F16 bits h as a float32.
func widenHalf(bf bool, h uint16) float32 {
	if bf {
		return tensor.BFloat16(h).Float32()
	}
	return tensor.Float16(h).Float32()
}

// reduceHalf is Reduce for BF16 (bf) or F16 elements, combined in float32 and rounded
// back; op is not Avg. The rounding is written out in the loop (here and in divideHalf)
// so that BF16FromFloat32 is inlined: a helper choosing between the two conversions
// would be too big to inline itself.
func reduceHalf(bf bool, op Op, dst, a, x []byte) {
	for i := 0; i < len(a); i += 2 {
		r := combineFloat(op, widenHalf(bf, le.Uint16(a[i:])), widenHalf(bf, le.Uint16(x[i:])))
		if bf {
			le.PutUint16(dst[i:], uint16(tensor.BF16FromFloat32(r)))
		} else {
			le.PutUint16(dst[i:], uint16(tensor.F16FromFloat32(r)))
		}
	}
}

// divideHalf divides every BF16 (bf) or F16 element of acc by n, in float32.
func divideHalf(bf bool, acc []byte, n int) {
	for i := 0; i < len(acc); i += 2 {
		r := widenHalf(bf, le.Uint16(acc[i:])) / float32(n)
		if bf {
			le.PutUint16(acc[i:], uint16(tensor.BF16FromFloat32(r)))
		} else {
			le.PutUint16(acc[i:], uint16(tensor.F16FromFloat32(r)))
		}
	}
}

// integer is an integer element type.
type integer interface{ int32 | int64 }

// loadInt returns the little-endian T at the start of b.
func loadInt[T integer](b []byte) T {
	if unsafe.Sizeof(T(0)) == 4 {
		return T(int32(le.Uint32(b)))
	}
	return T(int64(le.Uint64(b)))
}

// storeInt writes v at the start of b, little-endian.
func storeInt[T integer](b []byte, v T) {
	if unsafe.Sizeof(v) == 4 {
		le.PutUint32(b, uint32(v))
		return
	}
	le.PutUint64(b, uint64(v))
}

// reduceInt is Reduce for int32 or int64 elements; op is not Avg.
func reduceInt[T integer](op Op, dst, a, x []byte) {
	sz := int(unsafe.Sizeof(T(0)))
	for i := 0; i < len(a); i += sz {
		u, v := loadInt[T](a[i:]), loadInt[T](x[i:])
		switch op {
		case Max:
			u = max(u, v)
		case Min:
			u = min(u, v)
		default:
			u += v
		}
		storeInt(dst[i:], u)
	}
}

// divideInt divides every int32 or int64 element of acc by n, truncating.
func divideInt[T integer](acc []byte, n int) {
	sz := int(unsafe.Sizeof(T(0)))
	for i := 0; i < len(acc); i += sz {
		storeInt(acc[i:], loadInt[T](acc[i:])/T(n))
	}
}

// combineFloat applies op's step to a and b; NaN wins Max and Min, as in PyTorch.
func combineFloat[T float](op Op, a, b T) T {
	switch op {
	case Max:
		if b > a || b != b {
			return b
		}
		return a
	case Min:
		if b < a || b != b {
			return b
		}
		return a
	}
	return a + b
}
