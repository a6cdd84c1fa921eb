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
