package tensor

import (
	"fmt"
	"math"
	"unsafe"
)

// Tensor is an n-dimensional array on a device, with the autograd state that links it to
// the op that produced it. Its elements are contiguous in row-major order; views that keep
// that layout (Reshape, Narrow on the outermost dim) share storage, every other
// rearrangement (Transpose, Permute, Narrow on an inner dim) copies. A Tensor must not be
// used after its storage is released (by Release or by its scope closing): doing so panics.
type Tensor struct {
	st    *storage
	off   int // first element within st
	dtype DType
	shape Shape

	requiresGrad bool
	grad         *Tensor
	gradZero     bool  // grad's contents count as zero (ZeroGrad): the next gradient overwrites them
	fn           *node // op that produced this tensor; nil for leaves
	outIdx       int   // which output of fn
	tempLeaf     bool  // a leaf made by recomputation: its grad lives in a scope
	gradHook     func(*Tensor)
}

// Device returns the device that holds t.
func (t *Tensor) Device() *Device { return t.st.dev }

// DType returns t's element type.
func (t *Tensor) DType() DType { return t.dtype }

// Shape returns t's shape. The caller must not modify it.
func (t *Tensor) Shape() Shape { return t.shape }

// Dim returns t's size along dim (negative counts from the end).
func (t *Tensor) Dim(dim int) int { return t.shape[normDim("Dim", dim, len(t.shape))] }

// Rank returns the number of dims.
func (t *Tensor) Rank() int { return len(t.shape) }

// Numel returns the number of elements.
func (t *Tensor) Numel() int { return t.shape.Numel() }

// Span returns the kernel's view of t, for backends and fused ops written outside this
// package. It panics if t's storage has been released.
func (t *Tensor) Span() Span {
	t.checkLive("Span")
	return Span{Buf: t.st.buf, Off: t.off, DType: t.dtype, Shape: t.shape}
}

func (t *Tensor) checkLive(op string) {
	if t.st.released {
		panic(fmt.Sprintf("tensor: %s: use of a released tensor %v %v (its scope was closed or it was released)", op, t.dtype, t.shape))
	}
}

// Released reports whether t's storage has been returned to the pool.
func (t *Tensor) Released() bool { return t.st.released }

// SharesStorage reports whether t and u are views of one storage, so that releasing one
// releases the other.
func (t *Tensor) SharesStorage(u *Tensor) bool { return t.st == u.st }

func (t *Tensor) String() string {
	if t.st.released {
		return fmt.Sprintf("tensor(released %v %v)", t.dtype, t.shape)
	}
	if t.Numel() > 16 {
		return fmt.Sprintf("tensor(%v %v on %v)", t.dtype, t.shape, t.st.dev)
	}
	return fmt.Sprintf("tensor(%v %v %v)", t.dtype, t.shape, ToSlice[float64](t))
}

// empty returns a new tensor of shape on dev whose contents are undefined.
func empty(dev *Device, dt DType, shape Shape) *Tensor {
	for _, d := range shape {
		if d < 0 {
			panic(fmt.Sprintf("tensor: negative dim in shape %v", shape))
		}
	}
	return &Tensor{st: dev.alloc(dt, shape.Numel(), false), dtype: dt, shape: shape.Clone()}
}

// Empty returns a new tensor whose contents are undefined (use it for outputs that are
// about to be overwritten).
func Empty(dev *Device, dt DType, shape ...int) *Tensor { return empty(dev, dt, shape) }

// Full returns a new tensor with every element v (rounded to dt).
func Full(dev *Device, dt DType, v float64, shape ...int) *Tensor {
	t := empty(dev, dt, shape)
	dev.backend.Fill(t.Span(), v)
	return t
}

// Zeros returns a new tensor of zeros.
func Zeros(dev *Device, dt DType, shape ...int) *Tensor { return Full(dev, dt, 0, shape...) }

// Ones returns a new tensor of ones.
func Ones(dev *Device, dt DType, shape ...int) *Tensor { return Full(dev, dt, 1, shape...) }

// Scalar returns a 0-dim tensor holding v.
func Scalar(dev *Device, dt DType, v float64) *Tensor { return Full(dev, dt, v) }

// ZerosLike returns zeros with t's device, dtype and shape.
func ZerosLike(t *Tensor) *Tensor { return Full(t.Device(), t.dtype, 0, t.shape...) }

// Arange returns the 1-D tensor [start, start+step, ...] of n elements.
func Arange(dev *Device, dt DType, start, step float64, n int) *Tensor {
	t := empty(dev, dt, Shape{n})
	dev.backend.Arange(t.Span(), start, step)
	return t
}

// FromSlice returns a new tensor of the given shape holding a copy of data (its dtype is
// T's). With no shape, the tensor is 1-D. It panics if len(data) ≠ shape's element count.
func FromSlice[T Elem](dev *Device, data []T, shape ...int) *Tensor {
	if len(shape) == 0 {
		shape = []int{len(data)}
	}
	t := empty(dev, DTypeOf[T](), shape)
	if t.Numel() != len(data) {
		panic(fmt.Sprintf("tensor: FromSlice: %d elements for shape %v", len(data), t.shape))
	}
	dev.backend.WriteHost(t.Span(), asBytes(data))
	return t
}

// ToSlice returns a copy of t's elements in row-major order, converted to T (floats to
// integers truncate toward zero, as Go conversions do).
func ToSlice[T Elem](t *Tensor) []T {
	t.checkLive("ToSlice")
	return ReadInto(make([]T, t.Numel()), t)
}

// Item returns the value of a one-element tensor as float64. It panics if t has more than
// one element.
func (t *Tensor) Item() float64 {
	if t.Numel() != 1 {
		panic(fmt.Sprintf("tensor: Item: tensor of shape %v has %d elements", t.shape, t.Numel()))
	}
	if t.dtype == I64 {
		return float64(ToSlice[int64](t)[0])
	}
	return ToSlice[float64](t)[0]
}

func asBytes[T Elem](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	var z T
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*int(unsafe.Sizeof(z)))
}

// To returns a copy of t on device dev, through host memory (a no-op copy is still made
// when dev is t's device). The copy does not take part in autograd.
func (t *Tensor) To(dev *Device) *Tensor {
	t.checkLive("To")
	host := make([]byte, t.Numel()*t.dtype.Size())
	t.st.dev.backend.ReadHost(t.Span(), host)
	out := empty(dev, t.dtype, t.shape)
	dev.backend.WriteHost(out.Span(), host)
	return out
}

// castRaw converts t to dtype dt without recording a graph.
func castRaw(t *Tensor, dt DType) *Tensor {
	out := empty(t.st.dev, dt, t.shape)
	t.st.dev.backend.Cast(out.Span(), t.Span())
	return out
}

// AllClose reports whether a and b have the same shape and every pair of elements
// satisfies |a−b| ≤ atol + rtol·|b| (NaNs are never close).
func AllClose(a, b *Tensor, rtol, atol float64) bool {
	if !a.shape.Equal(b.shape) {
		return false
	}
	x, y := ToSlice[float64](a), ToSlice[float64](b)
	for i := range x {
		if !(math.Abs(x[i]-y[i]) <= atol+rtol*math.Abs(y[i])) {
			return false
		}
	}
	return true
}
