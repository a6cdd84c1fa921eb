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
func reduceInto(dt tensor.DType, op Op, acc, x []byte) {
	if len(acc) != len(x) {
		panic(fmt.Sprintf("parallel: reduce: %d bytes with %d", len(acc), len(x)))
	}
	if op == Sum && (dt == tensor.F32 || dt == tensor.F64) && sumFast(dt, acc, x) {
		return
	}
	le := binary.LittleEndian
	switch dt {
	case tensor.F64:
		for i := 0; i < len(acc); i += 8 {
			a, b := math.Float64frombits(le.Uint64(acc[i:])), math.Float64frombits(le.Uint64(x[i:]))
			le.PutUint64(acc[i:], math.Float64bits(combineFloat(op, a, b)))
		}
	case tensor.F32:
		for i := 0; i < len(acc); i += 4 {
			a, b := math.Float32frombits(le.Uint32(acc[i:])), math.Float32frombits(le.Uint32(x[i:]))
			le.PutUint32(acc[i:], math.Float32bits(combineFloat(op, a, b)))
		}
	case tensor.BF16:
		for i := 0; i < len(acc); i += 2 {
			a, b := tensor.BFloat16(le.Uint16(acc[i:])).Float32(), tensor.BFloat16(le.Uint16(x[i:])).Float32()
			le.PutUint16(acc[i:], uint16(tensor.BF16FromFloat32(combineFloat(op, a, b))))
		}
	case tensor.F16:
		for i := 0; i < len(acc); i += 2 {
			a, b := tensor.Float16(le.Uint16(acc[i:])).Float32(), tensor.Float16(le.Uint16(x[i:])).Float32()
			le.PutUint16(acc[i:], uint16(tensor.F16FromFloat32(combineFloat(op, a, b))))
		}
	case tensor.I32:
		for i := 0; i < len(acc); i += 4 {
			a, b := int32(le.Uint32(acc[i:])), int32(le.Uint32(x[i:]))
			le.PutUint32(acc[i:], uint32(combineInt(op, int64(a), int64(b))))
		}
	case tensor.I64:
		for i := 0; i < len(acc); i += 8 {
			a, b := int64(le.Uint64(acc[i:])), int64(le.Uint64(x[i:]))
			le.PutUint64(acc[i:], uint64(combineInt(op, a, b)))
		}
	default:
		panic(fmt.Sprintf("parallel: reduce: unknown dtype %v", dt))
	}
}

// sumFast adds x into acc viewed as float32 or float64 slices, on little-endian machines
// where both are aligned for the type; it reports whether it did. The result is the same
// as the byte-wise loop's.
func sumFast(dt tensor.DType, acc, x []byte) bool {
	if !littleEndian || len(acc) == 0 {
		return false
	}
	pa, px := uintptr(unsafe.Pointer(&acc[0])), uintptr(unsafe.Pointer(&x[0]))
	if dt == tensor.F32 {
		if pa%4 != 0 || px%4 != 0 {
			return false
		}
		a := unsafe.Slice((*float32)(unsafe.Pointer(&acc[0])), len(acc)/4)
		b := unsafe.Slice((*float32)(unsafe.Pointer(&x[0])), len(x)/4)
		for i := range a {
			a[i] += b[i]
		}
		return true
	}
	if pa%8 != 0 || px%8 != 0 {
		return false
	}
	a := unsafe.Slice((*float64)(unsafe.Pointer(&acc[0])), len(acc)/8)
	b := unsafe.Slice((*float64)(unsafe.Pointer(&x[0])), len(x)/8)
	for i := range a {
		a[i] += b[i]
	}
	return true
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
