package cuda

import (
	"encoding/binary"
	"fmt"
)

// Launch geometry and the Idx argument of the strided kernels (prelude.cu).

// maxIdxDims is MAXD of prelude.cu.
const maxIdxDims = 8

// idxDesc is the Go twin of prelude.cu's Idx: up to three operands walked in the
// row-major order of a shape.
type idxDesc struct {
	nd    int
	shape [maxIdxDims]int64
	st    [3][maxIdxDims]int64
}

// newIdx describes walking shape with each operand's strides (in elements; 0 for a
// broadcast dim). Dims of size 1 are dropped and neighbours that every operand walks
// contiguously are merged, so that kernels divide as little as possible. It panics if
// more than maxIdxDims dims remain or more than three operands are given.
func newIdx(shape []int, strides ...[]int) idxDesc {
	if len(strides) > 3 {
		panic(fmt.Sprintf("cuda: newIdx: %d operands, at most 3", len(strides)))
	}
	type dim struct {
		size int64
		st   [3]int64
	}
	var dims []dim // innermost first
	for d := len(shape) - 1; d >= 0; d-- {
		if shape[d] == 1 {
			continue
		}
		cur := dim{size: int64(shape[d])}
		for k, s := range strides {
			cur.st[k] = int64(s[d])
		}
		if n := len(dims); n > 0 {
			in := &dims[n-1]
			merge := true
			for k := range strides {
				merge = merge && cur.st[k] == in.st[k]*in.size
			}
			if merge {
				in.size *= cur.size
				continue
			}
		}
		dims = append(dims, cur)
	}
	if len(dims) > maxIdxDims {
		panic(fmt.Sprintf("cuda: shape %v has %d dims after merging, kernels take at most %d", shape, len(dims), maxIdxDims))
	}
	var x idxDesc
	x.nd = len(dims)
	for i, d := range dims {
		j := len(dims) - 1 - i // outermost first
		x.shape[j] = d.size
		for k := range 3 {
			x.st[k][j] = d.st[k]
		}
	}
	return x
}

// offsets returns element i's offset in each operand, as idx_offsets in prelude.cu does.
func (x idxDesc) offsets(i int64) [3]int64 {
	var o [3]int64
	for d := x.nd - 1; d >= 0; d-- {
		q := i / x.shape[d]
		r := i - q*x.shape[d]
		i = q
		for k := range 3 {
			o[k] += r * x.st[k][d]
		}
	}
	return o
}

// bytes returns x in the memory layout of the C struct (little-endian long longs).
func (x idxDesc) bytes() []byte {
	b := make([]byte, 0, 8*(1+maxIdxDims*4))
	b = binary.LittleEndian.AppendUint64(b, uint64(x.nd))
	for _, v := range x.shape {
		b = binary.LittleEndian.AppendUint64(b, uint64(v))
	}
	for k := range 3 {
		for _, v := range x.st[k] {
			b = binary.LittleEndian.AppendUint64(b, uint64(v))
		}
	}
	return b
}

// contiguousStrides returns the row-major strides of shape.
func contiguousStrides(shape []int) []int {
	st := make([]int, len(shape))
	n := 1
	for i := len(shape) - 1; i >= 0; i-- {
		st[i] = n
		n *= shape[i]
	}
	return st
}

// Threads per block of the elementwise kernels.
const blockSize = 256

// gridFor returns the number of blocks for n elements of a grid-stride kernel with
// blockSize threads: enough to cover n, at most maxBlocks.
func gridFor(n int64, maxBlocks int) uint32 {
	g := (n + blockSize - 1) / blockSize
	return uint32(max(1, min(g, int64(maxBlocks))))
}

// rowBlock returns the threads per block for kernels that reduce a row of n elements
// with one block: a multiple of 32 giving each thread about four elements, at most 1024.
func rowBlock(n int64) uint32 {
	t := (n/4 + 31) / 32 * 32
	return uint32(min(1024, max(32, t)))
}
