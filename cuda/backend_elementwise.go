package cuda

import (
	"fmt"

	"megago/cuda/internal/driver"
	"megago/tensor"
)

// Copies, casts, random draws and elementwise functions
// (internal/kernels/elementwise.cu).

// copyKernel returns the strided-copy kernel for elements of size bytes.
func copyKernel(size int) string {
	switch size {
	case 2, 4, 8:
		return fmt.Sprintf("copy_strided_%d", size)
	}
	panic(fmt.Sprintf("cuda: no copy kernel for %d-byte elements", size))
}

// Copy2D copies rows of cols elements between strided rows.
func (b *Backend) Copy2D(dst tensor.Span, dstStride int, src tensor.Span, srcStride int, rows, cols int) {
	if rows == 0 || cols == 0 {
		return
	}
	release := b.dev.bind()
	defer release()
	d, s := b.buf("Copy2D", dst.Buf), b.buf("Copy2D", src.Buf)
	sz := dst.DType.Size()
	for _, c := range []struct {
		buf         *devBuf
		off, stride int
	}{{d, dst.Off, dstStride}, {s, src.Off, srcStride}} {
		if last := c.off + (rows-1)*c.stride + cols; c.off < 0 || last > c.buf.n {
			panic(fmt.Sprintf("cuda: Copy2D: %d rows of %d at offset %d stride %d outside %d elements", rows, cols, c.off, c.stride, c.buf.n))
		}
	}
	dp, sp := d.ptr+driver.DevicePtr(dst.Off*sz), s.ptr+driver.DevicePtr(src.Off*sz)
	if dstStride == cols && srcStride == cols {
		b.must(b.dev.dtod(dp, sp, int64(rows*cols*sz)))
		return
	}
	x := newIdx([]int{rows, cols}, []int{dstStride, 1}, []int{srcStride, 1})
	b.run("elementwise", copyKernel(sz), int64(rows*cols), driver.NewKernelArgs().Ptr(dp).Ptr(sp).Bytes(x.bytes()).I64(int64(rows*cols)))
}

// Arange sets element i of dst to start + i·step.
func (b *Backend) Arange(dst tensor.Span, start, step float64) {
	release := b.dev.bind()
	defer release()
	n := int64(dst.Numel())
	b.run("elementwise", "arange", n, driver.NewKernelArgs().Ptr(b.ptr("Arange", dst)).I32(dtArg(dst.DType)).I64(n).F64(start).F64(step))
}

// Cast converts src's elements to dst's dtype, rounding to nearest even.
func (b *Backend) Cast(dst, src tensor.Span) {
	release := b.dev.bind()
	defer release()
	n := int64(dst.Numel())
	if dst.DType == src.DType {
		b.must(b.dev.dtod(b.ptr("Cast", dst), b.ptr("Cast", src), n*int64(dst.DType.Size())))
		return
	}
	b.run("elementwise", "cast", n, driver.NewKernelArgs().Ptr(b.ptr("Cast", dst)).I32(dtArg(dst.DType)).
		Ptr(b.ptr("Cast", src)).I32(dtArg(src.DType)).I64(n))
}

// Permute sets dst so that dst's dim i is src's dim perm[i].
func (b *Backend) Permute(dst, src tensor.Span, perm []int) {
	release := b.dev.bind()
	defer release()
	srcSt := contiguousStrides(src.Shape)
	st := make([]int, len(perm))
	for i, p := range perm {
		st[i] = srcSt[p]
	}
	n := int64(dst.Numel())
	x := newIdx(dst.Shape, contiguousStrides(dst.Shape), st)
	b.run("elementwise", copyKernel(dst.DType.Size()), n,
		driver.NewKernelArgs().Ptr(b.ptr("Permute", dst)).Ptr(b.ptr("Permute", src)).Bytes(x.bytes()).I64(n))
}

// Random fills dst with the draws of its region of the full tensor.
func (b *Backend) Random(dst tensor.Span, p tensor.RandomParams) {
	release := b.dev.bind()
	defer release()
	full := contiguousStrides(p.Full)
	base := 0
	for d, s := range p.Start {
		base += s * full[d]
	}
	n := int64(dst.Numel())
	x := newIdx(dst.Shape, full[len(full)-len(dst.Shape):])
	b.run("elementwise", "random_fill", n, driver.NewKernelArgs().Ptr(b.ptr("Random", dst)).I32(dtArg(dst.DType)).I64(n).
		Bytes(x.bytes()).I64(int64(base)).U32(p.Key[0]).U32(p.Key[1]).I32(int32(p.Dist)).F64(p.A).F64(p.B))
}

// Unary sets dst = op(x) elementwise.
func (b *Backend) Unary(op tensor.UnaryOp, dst, x tensor.Span, p float64) {
	release := b.dev.bind()
	defer release()
	n := int64(dst.Numel())
	b.run("elementwise", "unary"+computeSuffix(dst.DType), n, driver.NewKernelArgs().Ptr(b.ptr("Unary", dst)).
		I32(dtArg(dst.DType)).Ptr(b.ptr("Unary", x)).I32(dtArg(x.DType)).I64(n).I32(int32(op)).F64(p))
}

// UnaryBackward sets dx = dy·op'(x).
func (b *Backend) UnaryBackward(op tensor.UnaryOp, dx, x, y, dy tensor.Span, p float64) {
	release := b.dev.bind()
	defer release()
	const name = "UnaryBackward"
	n := int64(dx.Numel())
	b.run("elementwise", "unary_bwd"+computeSuffix(dx.DType), n, driver.NewKernelArgs().Ptr(b.ptr(name, dx)).
		I32(dtArg(dx.DType)).Ptr(b.ptr(name, x)).Ptr(b.ptr(name, y)).Ptr(b.ptr(name, dy)).I64(n).I32(int32(op)).F64(p))
}

// Binary sets dst = op(a, b) with broadcasting.
func (b *Backend) Binary(op tensor.BinaryOp, dst, x, y tensor.Span) {
	release := b.dev.bind()
	defer release()
	n := int64(dst.Numel())
	idx := newIdx(dst.Shape, tensor.BroadcastStrides(x.Shape, dst.Shape), tensor.BroadcastStrides(y.Shape, dst.Shape))
	b.run("elementwise", "binary"+computeSuffix(dst.DType), n, driver.NewKernelArgs().Ptr(b.ptr("Binary", dst)).
		I32(dtArg(dst.DType)).Ptr(b.ptr("Binary", x)).Ptr(b.ptr("Binary", y)).I64(n).I32(int32(op)).Bytes(idx.bytes()))
}

// Where sets dst = cond ≠ 0 ? a : b with broadcasting.
func (b *Backend) Where(dst, cond, x, y tensor.Span) {
	release := b.dev.bind()
	defer release()
	n := int64(dst.Numel())
	idx := newIdx(dst.Shape, tensor.BroadcastStrides(cond.Shape, dst.Shape),
		tensor.BroadcastStrides(x.Shape, dst.Shape), tensor.BroadcastStrides(y.Shape, dst.Shape))
	b.run("elementwise", "where", n, driver.NewKernelArgs().Ptr(b.ptr("Where", dst)).I32(dtArg(dst.DType)).
		Ptr(b.ptr("Where", cond)).I32(dtArg(cond.DType)).Ptr(b.ptr("Where", x)).Ptr(b.ptr("Where", y)).I64(n).Bytes(idx.bytes()))
}

// AccumulateGrad adds grad into main (F32 or F64) and zeroes grad.
func (b *Backend) AccumulateGrad(main, grad tensor.Span) {
	if (main.DType != tensor.F32 && main.DType != tensor.F64) || !grad.DType.IsFloat() || main.Numel() != grad.Numel() {
		panic(fmt.Sprintf("cuda: AccumulateGrad: main %v %v from grad %v %v", main.DType, main.Shape, grad.DType, grad.Shape))
	}
	release := b.dev.bind()
	defer release()
	n := int64(main.Numel())
	b.run("elementwise", "accumulate_grad", n, driver.NewKernelArgs().Ptr(b.ptr("AccumulateGrad", main)).I32(dtArg(main.DType)).
		Ptr(b.ptr("AccumulateGrad", grad)).I32(dtArg(grad.DType)).I64(n))
}
