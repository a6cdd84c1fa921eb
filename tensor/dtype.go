package tensor

import "fmt"

// DType is the element type of a tensor's storage.
type DType uint8

// The element types. The CPU backend computes F64 (and integer) tensors in float64 and
// F32, BF16 and F16 tensors in float32; BF16 and F16 are storage formats whose conversions
// round to nearest, ties to even.
const (
	F64  DType = iota + 1 // IEEE 754 binary64
	F32                   // IEEE 754 binary32
	BF16                  // bfloat16: the top 16 bits of a binary32
	F16                   // IEEE 754 binary16
	I32                   // signed 32-bit integer
	I64                   // signed 64-bit integer
)

// Size returns the number of bytes of one element.
func (d DType) Size() int {
	switch d {
	case F64, I64:
		return 8
	case F32, I32:
		return 4
	case BF16, F16:
		return 2
	}
	panic(fmt.Sprintf("tensor: unknown dtype %d", uint8(d)))
}

// IsFloat reports whether d is a floating-point type.
func (d DType) IsFloat() bool { return d == F64 || d == F32 || d == BF16 || d == F16 }

// Compute returns the type in which the CPU backend computes on d: F64 for F64, I32 and
// I64 (integers are exact up to 2^53), F32 for F32, BF16 and F16.
func (d DType) Compute() DType {
	switch d {
	case F64, I32, I64:
		return F64
	}
	return F32
}

// String returns the dtype's name as PyTorch spells it ("float32", "bfloat16", ...).
func (d DType) String() string {
	switch d {
	case F64:
		return "float64"
	case F32:
		return "float32"
	case BF16:
		return "bfloat16"
	case F16:
		return "float16"
	case I32:
		return "int32"
	case I64:
		return "int64"
	}
	return fmt.Sprintf("dtype(%d)", uint8(d))
}

// Elem is the set of Go types that tensors can be created from and exported to.
// BFloat16 and Float16 hold raw bit patterns.
type Elem interface {
	float64 | float32 | BFloat16 | Float16 | int32 | int64
}

// DTypeOf returns the dtype whose elements have Go type T.
func DTypeOf[T Elem]() DType {
	var z T
	switch any(z).(type) {
	case float64:
		return F64
	case float32:
		return F32
	case BFloat16:
		return BF16
	case Float16:
		return F16
	case int32:
		return I32
	default:
		return I64
	}
}
