package gorgonia

import (
	"fmt"

	gtensor "gorgonia.org/tensor"

	"megago/tensor"
)

// ToDense returns a copy of t as a row-major gorgonia dense tensor of the same shape: F64
// becomes Float64; F32, BF16 and F16 become Float32 (the half types are widened exactly);
// I32 and I64 become Int32 and Int64. A 0-dim tensor becomes a scalar-shaped dense tensor.
// It panics if t has been released or has no elements (gorgonia cannot hold an empty dense
// tensor).
func ToDense(t *tensor.Tensor) *gtensor.Dense {
	if t.Numel() == 0 {
		panic(fmt.Sprintf("gorgonia: ToDense: %v %v has no elements", t.DType(), t.Shape()))
	}
	switch t.DType() {
	case tensor.F64:
		return newDense(tensor.ToSlice[float64](t), t.Shape())
	case tensor.F32, tensor.BF16, tensor.F16:
		return newDense(tensor.ToSlice[float32](t), t.Shape())
	case tensor.I32:
		return newDense(tensor.ToSlice[int32](t), t.Shape())
	case tensor.I64:
		return newDense(tensor.ToSlice[int64](t), t.Shape())
	}
	panic(fmt.Sprintf("gorgonia: ToDense: unknown dtype %v", t.DType()))
}

// newDense wraps data (row-major, owned by the result) in a dense tensor of shape.
func newDense[T float64 | float32 | int32 | int64](data []T, shape tensor.Shape) *gtensor.Dense {
	if len(shape) == 0 {
		return gtensor.New(gtensor.FromScalar(data[0]))
	}
	return gtensor.New(gtensor.WithShape(shape.Clone()...), gtensor.WithBacking(data))
}

// FromDense returns a new tensor on dev holding a copy of d's elements in row-major order,
// with d's shape (a scalar-shaped d gives a 0-dim tensor): Float64 becomes F64, Float32 F32,
// Int32 I32, and Int64 and Int become I64. Views, transposes and column-major tensors are
// read in their logical order. A mask on d is ignored. It returns an error naming the dtype
// for any other dtype.
func FromDense(dev *tensor.Device, d *gtensor.Dense) (*tensor.Tensor, error) {
	if d == nil {
		return nil, fmt.Errorf("gorgonia: FromDense: nil dense tensor")
	}
	if d.IsMaterializable() { // a slice or a transpose: copy it into its logical layout
		m, ok := d.Materialize().(*gtensor.Dense)
		if !ok {
			return nil, fmt.Errorf("gorgonia: FromDense: materializing %v %v gave a %T", d.Dtype(), d.Shape(), d.Materialize())
		}
		d = m
	}
	switch d.Dtype() {
	case gtensor.Float64:
		return fromSlice(dev, rowMajor[float64](d), d.Shape()), nil
	case gtensor.Float32:
		return fromSlice(dev, rowMajor[float32](d), d.Shape()), nil
	case gtensor.Int32:
		return fromSlice(dev, rowMajor[int32](d), d.Shape()), nil
	case gtensor.Int64:
		return fromSlice(dev, rowMajor[int64](d), d.Shape()), nil
	case gtensor.Int:
		ints := rowMajor[int](d)
		out := make([]int64, len(ints))
		for i, v := range ints {
			out[i] = int64(v)
		}
		return fromSlice(dev, out, d.Shape()), nil
	}
	return nil, fmt.Errorf("gorgonia: FromDense: dtype %v of a %v dense tensor has no megago equivalent (want float64, float32, int32, int64 or int)", d.Dtype(), d.Shape())
}

// fromSlice copies row-major data into a new tensor of shape (0-dim for a scalar shape,
// which tensor.FromSlice would make 1-D).
func fromSlice[T tensor.Elem](dev *tensor.Device, data []T, shape gtensor.Shape) *tensor.Tensor {
	t := tensor.FromSlice(dev, data, len(data))
	return t.Reshape(shape...)
}

// rowMajor returns d's elements in row-major logical order. d must not be a view or a
// transpose (materialize it first); it may be column-major. The result may share d's
// backing array.
func rowMajor[T any](d *gtensor.Dense) []T {
	if d.IsScalar() {
		return []T{d.ScalarValue().(T)}
	}
	n := d.Shape().TotalSize()
	raw := d.Data().([]T)
	if !d.RequiresIterator() && !d.DataOrder().IsColMajor() {
		return raw[:n]
	}
	out := make([]T, 0, n)
	it := gtensor.FlatIteratorFromDense(d) // visits logical positions in row-major order
	for i, err := it.Start(); err == nil; i, err = it.Next() {
		out = append(out, raw[i])
	}
	return out
}
