package cuda

import (
	"encoding/binary"
	"fmt"

	"megago/cuda/internal/cublaslt"
	"megago/cuda/internal/driver"
	"megago/tensor"
)

// Reductions, gathers and matrix products (internal/kernels/reduce.cu, cuBLASLt).

// Reduce reduces src along dim into dst.
func (b *Backend) Reduce(op tensor.ReduceOp, dst, src tensor.Span, dim int) {
	release := b.dev.bind()
	defer release()
	outer, n, inner := src.Shape.Split3(dim)
	mean := int32(0)
	if op == tensor.ReduceMean {
		mean = 1
	}
	sfx := computeSuffix(dst.DType)
	d, s := b.ptr("Reduce", dst), b.ptr("Reduce", src)
	if inner == 1 {
		b.runRows("reduce", "reduce_rows"+sfx, int64(outer), int64(n), driver.NewKernelArgs().Ptr(d).I32(dtArg(dst.DType)).
			Ptr(s).I32(dtArg(src.DType)).I64(int64(outer)).I64(int64(n)).I32(mean))
		return
	}
	b.run("reduce", "reduce_cols"+sfx, int64(outer*inner), driver.NewKernelArgs().Ptr(d).I32(dtArg(dst.DType)).
		Ptr(s).I32(dtArg(src.DType)).I64(int64(outer)).I64(int64(n)).I64(int64(inner)).I32(mean))
}

// Max sets dst to the maximum along dim and idx (I64) to its first position.
func (b *Backend) Max(dst, idx, src tensor.Span, dim int) {
	release := b.dev.bind()
	defer release()
	outer, n, inner := src.Shape.Split3(dim)
	if n == 0 {
		panic(fmt.Sprintf("cuda: Max: empty dim %d of %v", dim, src.Shape))
	}
	b.run("reduce", "max_dim"+computeSuffix(dst.DType), int64(outer*inner), driver.NewKernelArgs().Ptr(b.ptr("Max", dst)).
		I32(dtArg(dst.DType)).Ptr(b.ptr("Max", idx)).Ptr(b.ptr("Max", src)).I32(dtArg(src.DType)).
		I64(int64(outer)).I64(int64(n)).I64(int64(inner)))
}

// Gather sets dst[..i..] = src[..idx[..i..]..] along dim.
func (b *Backend) Gather(dst, src, idx tensor.Span, dim int) {
	release := b.dev.bind()
	defer release()
	outer, m, inner := dst.Shape.Split3(dim)
	a := driver.NewKernelArgs().Ptr(b.ptr("Gather", dst)).Ptr(b.ptr("Gather", src)).I32(dtArg(dst.DType)).
		Ptr(b.ptr("Gather", idx)).I32(dtArg(idx.DType)).I64(int64(outer)).I64(int64(m)).I64(int64(inner)).I64(int64(src.Shape[dim]))
	b.run("reduce", "gather", int64(outer*m*inner), b.flagArgs(a, opGather))
}

// ScatterAdd adds src[..i..] into dst[..idx[..i..]..] along dim.
func (b *Backend) ScatterAdd(dst, src, idx tensor.Span, dim int) {
	release := b.dev.bind()
	defer release()
	outer, m, inner := src.Shape.Split3(dim)
	a := driver.NewKernelArgs().Ptr(b.ptr("ScatterAdd", dst)).Ptr(b.ptr("ScatterAdd", src)).I32(dtArg(dst.DType)).
		Ptr(b.ptr("ScatterAdd", idx)).I32(dtArg(idx.DType)).I64(int64(outer)).I64(int64(m)).I64(int64(inner)).I64(int64(dst.Shape[dim]))
	b.run("reduce", "scatter_add", int64(outer*m*inner), b.flagArgs(a, opScatterAdd))
}

// gemmType returns cuBLASLt's type for a float dtype.
func gemmType(op string, dt tensor.DType) cublaslt.DataType {
	switch dt {
	case tensor.F32:
		return cublaslt.TypeF32
	case tensor.F64:
		return cublaslt.TypeF64
	case tensor.BF16:
		return cublaslt.TypeBF16
	case tensor.F16:
		return cublaslt.TypeF16
	}
	panic(fmt.Sprintf("cuda: %s: no matrix product for %v", op, dt))
}

// MatMul computes a batched matrix product with cuBLASLt.
func (b *Backend) MatMul(dst, x, y tensor.Span, p tensor.MatMulParams) {
	release := b.dev.bind()
	defer release()
	if p.Batch == 0 || p.M == 0 || p.N == 0 {
		return
	}
	d := b.ptr("MatMul", dst)
	if p.K == 0 {
		if !p.Accumulate {
			b.must(b.dev.memset(d, 1, 0, int64(dst.Numel()*dst.DType.Size())))
		}
		return
	}
	g := cublaslt.Gemm{Type: gemmType("MatMul", dst.DType), M: p.M, N: p.N, K: p.K, TransA: p.TransA, TransB: p.TransB,
		Batch: p.Batch, StrideA: int64(p.StrideA), StrideB: int64(p.StrideB), StrideD: int64(p.M * p.N),
		Accumulate: p.Accumulate, AllowTF32: b.cfg.AllowTF32}
	b.must(b.dev.gemm(g, 1, b.ptr("MatMul", x), b.ptr("MatMul", y), d, 0, 0))
}

// sumSquaresBlock is the number of elements one block of sumsq_partial sums.
const sumSquaresBlock = 1 << 16

// sumSquaresTable splits ranges into blocks: the (lo, hi) pairs of every block, then
// first[r], the index of range r's first block (len(ranges)+1 entries).
func sumSquaresTable(ranges [][2]int) (pairs []int64, first []int64) {
	first = append(first, 0)
	for _, rg := range ranges {
		for lo := rg[0]; lo < rg[1]; lo += sumSquaresBlock {
			pairs = append(pairs, int64(lo), int64(min(lo+sumSquaresBlock, rg[1])))
		}
		first = append(first, int64(len(pairs)/2))
	}
	return pairs, first
}

// SumSquares sets dst[i] (F64) to the sum of x² over ranges[i], in float64.
func (b *Backend) SumSquares(dst, x tensor.Span, ranges [][2]int) {
	if dst.DType != tensor.F64 || dst.Numel() != len(ranges) {
		panic(fmt.Sprintf("cuda: SumSquares: dst %v %v for %d ranges, want float64", dst.DType, dst.Shape, len(ranges)))
	}
	for _, rg := range ranges {
		if rg[0] < 0 || rg[1] < rg[0] || rg[1] > x.Numel() {
			panic(fmt.Sprintf("cuda: SumSquares: range %v outside %d elements", rg, x.Numel()))
		}
	}
	if len(ranges) == 0 {
		return
	}
	release := b.dev.bind()
	defer release()
	pairs, first := sumSquaresTable(ranges)
	nblocks := int64(len(pairs) / 2)
	table := b.upload(append(pairs, first...))
	defer b.alloc.put(table)
	part, err := b.alloc.get(max(1, nblocks) * 8)
	b.must(err)
	defer b.alloc.put(part)
	if nblocks > 0 {
		grid := uint32(min(nblocks, int64(b.maxBlocks)))
		b.must(b.dev.launch("reduce", "sumsq_partial", [3]uint32{grid, 1, 1}, [3]uint32{blockSize, 1, 1}, 0,
			driver.NewKernelArgs().Ptr(part).Ptr(b.ptr("SumSquares", x)).I32(dtArg(x.DType)).Ptr(table).I64(nblocks)))
	}
	b.run("reduce", "sumsq_finish", int64(len(ranges)), driver.NewKernelArgs().Ptr(b.ptr("SumSquares", dst)).Ptr(part).
		Ptr(table+driver.DevicePtr(8*len(pairs))).I64(int64(len(ranges))))
}

// upload copies int64 values to a new device block (returned to the allocator by the
// caller, after the kernels that read it have been queued: the stream orders them).
func (b *Backend) upload(vals []int64) driver.DevicePtr {
	buf := make([]byte, 8*max(1, len(vals)))
	for i, v := range vals {
		binary.LittleEndian.PutUint64(buf[8*i:], uint64(v))
	}
	p, err := b.alloc.get(int64(len(buf)))
	b.must(err)
	b.must(b.dev.htod(p, buf))
	return p
}
