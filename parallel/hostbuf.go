package parallel

import (
	"encoding/binary"
	"fmt"
	"math"
	"unsafe"

	"megago/tensor"
)

// Host-side helpers shared by the transports that move bytes (in-process, TCP): reading a
// tensor into host bytes, writing it back, and reducing byte buffers element by element.

// hostBytes returns a copy of t's elements as little-endian bytes.
func hostBytes(t *tensor.Tensor) []byte {
	b := make([]byte, t.Numel()*t.DType().Size())
	t.Device().Backend().ReadHost(t.Span(), b)
	return b
}

// readInto copies t's elements into b, which must have t's byte size.
func readInto(t *tensor.Tensor, b []byte) { t.Device().Backend().ReadHost(t.Span(), b) }

// writeHost copies host bytes into t.
func writeHost(t *tensor.Tensor, b []byte) { t.Device().Backend().WriteHost(t.Span(), b) }

// reduceInto sets acc = op(acc, x) element-wise for elements of dtype dt stored as
// little-endian bytes. BF16 and F16 are widened to float32, combined and rounded back
// (so a chain of reductions rounds after each step, as a ring does on the wire).
func reduceInto(dt tensor.DType, op Op, acc, x []byte) { reduceTo(dt, op, acc, acc, x) }

// reduceTo sets dst = op(a, x) element-wise, as reduceInto does; dst may be a or x (the
// same bytes, not a shifted overlap).
func reduceTo(dt tensor.DType, op Op, dst, a, x []byte) {
	if len(a) != len(x) || len(dst) != len(x) {
		panic(fmt.Sprintf("parallel: reduce: %d bytes with %d into %d", len(a), len(x), len(dst)))
	}
	if op == Sum && (dt == tensor.F32 || dt == tensor.F64) && sumFast(dt, dst, a, x) {
		return
	}
	le := binary.LittleEndian
	switch dt {
	case tensor.F64:
		for i := 0; i < len(a); i += 8 {
			u, v := math.Float64frombits(le.Uint64(a[i:])), math.Float64frombits(le.Uint64(x[i:]))
			le.PutUint64(dst[i:], math.Float64bits(combineFloat(op, u, v)))
		}
	case tensor.F32:
		for i := 0; i < len(a); i += 4 {
			u, v := math.Float32frombits(le.Uint32(a[i:])), math.Float32frombits(le.Uint32(x[i:]))
			le.PutUint32(dst[i:], math.Float32bits(combineFloat(op, u, v)))
		}
	case tensor.BF16:
		for i := 0; i < len(a); i += 2 {
			u, v := tensor.BFloat16(le.Uint16(a[i:])).Float32(), tensor.BFloat16(le.Uint16(x[i:])).Float32()
			le.PutUint16(dst[i:], uint16(tensor.BF16FromFloat32(combineFloat(op, u, v))))
		}
	case tensor.F16:
		for i := 0; i < len(a); i += 2 {
			u, v := tensor.Float16(le.Uint16(a[i:])).Float32(), tensor.Float16(le.Uint16(x[i:])).Float32()
			le.PutUint16(dst[i:], uint16(tensor.F16FromFloat32(combineFloat(op, u, v))))
		}
	case tensor.I32:
		for i := 0; i < len(a); i += 4 {
			u, v := int32(le.Uint32(a[i:])), int32(le.Uint32(x[i:]))
			le.PutUint32(dst[i:], uint32(combineInt(op, int64(u), int64(v))))
		}
	case tensor.I64:
		for i := 0; i < len(a); i += 8 {
			u, v := int64(le.Uint64(a[i:])), int64(le.Uint64(x[i:]))
			le.PutUint64(dst[i:], uint64(combineInt(op, u, v)))
		}
	default:
		panic(fmt.Sprintf("parallel: reduce: unknown dtype %v", dt))
	}
}

// sumFast sets dst = a + x viewed as float32 or float64 slices, on little-endian
// machines where all three are aligned for the type; it reports whether it did. The
// result is the same as the byte-wise loop's.
func sumFast(dt tensor.DType, dst, a, x []byte) bool {
	if !littleEndian || len(a) == 0 {
		return false
	}
	if dt == tensor.F32 {
		d, ok1 := floats[float32](dst)
		u, ok2 := floats[float32](a)
		v, ok3 := floats[float32](x)
		if !ok1 || !ok2 || !ok3 {
			return false
		}
		u, v = u[:len(d)], v[:len(d)]
		for i := range d {
			d[i] = u[i] + v[i]
		}
		return true
	}
	d, ok1 := floats[float64](dst)
	u, ok2 := floats[float64](a)
	v, ok3 := floats[float64](x)
	if !ok1 || !ok2 || !ok3 {
		return false
	}
	u, v = u[:len(d)], v[:len(d)]
	for i := range d {
		d[i] = u[i] + v[i]
	}
	return true
}

// floats views b as a slice of T if it is aligned for T.
func floats[T float32 | float64](b []byte) ([]T, bool) {
	var z T
	sz := int(unsafe.Sizeof(z))
	if uintptr(unsafe.Pointer(&b[0]))%uintptr(sz) != 0 {
		return nil, false
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), len(b)/sz), true
}

// littleEndian reports whether the machine stores integers little-endian, as the wire
// format does.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// finishAvg divides a summed buffer by n for Avg.
func finishAvg(dt tensor.DType, acc []byte, n int) {
	le := binary.LittleEndian
	switch dt {
	case tensor.F64:
		for i := 0; i < len(acc); i += 8 {
			le.PutUint64(acc[i:], math.Float64bits(math.Float64frombits(le.Uint64(acc[i:]))/float64(n)))
		}
	case tensor.F32:
		for i := 0; i < len(acc); i += 4 {
			le.PutUint32(acc[i:], math.Float32bits(math.Float32frombits(le.Uint32(acc[i:]))/float32(n)))
		}
	case tensor.BF16:
		for i := 0; i < len(acc); i += 2 {
			v := tensor.BFloat16(le.Uint16(acc[i:])).Float32() / float32(n)
			le.PutUint16(acc[i:], uint16(tensor.BF16FromFloat32(v)))
		}
	case tensor.F16:
		for i := 0; i < len(acc); i += 2 {
			v := tensor.Float16(le.Uint16(acc[i:])).Float32() / float32(n)
			le.PutUint16(acc[i:], uint16(tensor.F16FromFloat32(v)))
		}
	case tensor.I32:
		for i := 0; i < len(acc); i += 4 {
			le.PutUint32(acc[i:], uint32(int32(le.Uint32(acc[i:]))/int32(n)))
		}
	case tensor.I64:
		for i := 0; i < len(acc); i += 8 {
			le.PutUint64(acc[i:], uint64(int64(le.Uint64(acc[i:]))/int64(n)))
		}
	}
}

// stepOp is the op applied at each combining step: Avg sums, then finishAvg divides.
func stepOp(op Op) Op {
	if op == Avg {
		return Sum
	}
	return op
}

// combineFloat applies op to a and b; NaN wins Max and Min, as in PyTorch.
func combineFloat[T float32 | float64](op Op, a, b T) T {
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

func combineInt(op Op, a, b int64) int64 {
	switch op {
	case Max:
		return max(a, b)
	case Min:
		return min(a, b)
	}
	return a + b
}
