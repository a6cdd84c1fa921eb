package tensor

import "fmt"

// In-place updates, for optimizers and gradient buffers. They write into the receiver's
// storage (shared by its views), record nothing in the graph, and are meant for leaves such
// as parameters, gradients and optimizer state.

func checkInPlace(op string, t, src *Tensor) {
	if !t.shape.Equal(src.shape) || t.Device() != src.Device() {
		panic(fmt.Sprintf("tensor: %s: %v %v from %v %v: shapes or devices differ", op, t.dtype, t.shape, src.dtype, src.shape))
	}
}

// CopyFrom overwrites t's elements with src's, converting the dtype if they differ. It
// panics if the shapes or devices differ.
func (t *Tensor) CopyFrom(src *Tensor) {
	checkInPlace("CopyFrom", t, src)
	t.Device().backend.Cast(t.Span(), src.Span())
}

// Axpy sets t += alpha·x in place. It panics if the shapes, dtypes or devices differ.
func (t *Tensor) Axpy(alpha float64, x *Tensor) {
	checkInPlace("Axpy", t, x)
	checkSame("Axpy", t, x)
	b := t.Device().backend
	if alpha == 1 {
		b.Binary(OpAdd, t.Span(), t.Span(), x.Span())
		return
	}
	scaled := empty(t.Device(), t.dtype, t.shape)
	b.Unary(OpMulScalar, scaled.Span(), x.Span(), alpha)
	b.Binary(OpAdd, t.Span(), t.Span(), scaled.Span())
	scaled.Release()
}

// CopyNarrowFrom overwrites the elements of t.Narrow(dim, start, n), n = src.Dim(dim), in
// t's own storage even where that region is not contiguous (a KV cache's head-major slot
// taking a sequence's new positions), with src's. It panics if dim is out of range, if
// src's shape differs from t's but in dim, if [start, start+n) is not within t's dim, or
// if the dtypes or devices differ.
func (t *Tensor) CopyNarrowFrom(dim, start int, src *Tensor) {
	d := normDim("CopyNarrowFrom", dim, len(t.shape))
	want := t.shape.Clone()
	if len(src.shape) == len(t.shape) {
		want[d] = src.shape[d]
	}
	if !want.Equal(src.shape) || start < 0 || start+want[d] > t.shape[d] || t.dtype != src.dtype || t.Device() != src.Device() {
		panic(fmt.Sprintf("tensor: CopyNarrowFrom: dim %d from %d of %v %v from %v %v: shapes, dtypes or devices do not fit",
			dim, start, t.dtype, t.shape, src.dtype, src.shape))
	}
	outer, size, inner := t.shape.Split3(d)
	n := src.shape[d]
	t.Device().backend.Copy2D(t.Span().at(start*inner), size*inner, src.Span(), n*inner, outer, n*inner)
}
