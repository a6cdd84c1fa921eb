package tensor

import (
	"math"
	"sync"
)

// The CPU backend's RowKernels (fused_rows.go). Each kernel is generic over the compute
// type T (float32 for F32, BF16 and F16, float64 for F64) and makes one pass over the
// rows, each goroutine taking whole rows, so a row's result does not depend on the number
// of threads; the float32 rows run vmath.go's AVX-512 loops where there is one (norm
// statistics and rows, the tanh GeLU and its derivative, the exponential of SiLU, adds and
// multiplies), and the dropout mask's Philox blocks are drawn eight at a time
// (fused_rows_amd64.s). Column sums (weight and bias gradients) are accumulated per block
// of rows (blockColSums) in the same pass.

// fusedRowGrain is the number of elements below which a row loop stays on one goroutine.
const fusedRowGrain = 8192

// rowCount returns the number of rows of s and their length, its last dim.
func rowCount(s Span) (rows, c int) {
	c = s.Shape[len(s.Shape)-1]
	return s.Numel() / max(c, 1), c
}

// forRowChunks runs body over the rows [0, rows) of length c, split across goroutines.
func forRowChunks(rows, c int, body func(lo, hi int)) {
	parallelFor(rows, max(1, fusedRowGrain/max(c, 1)), body)
}

// Column sums are accumulated in float64 over fixed blocks of rows (at most maxColBlocks
// blocks of at least minBlockRows rows: a partition that depends only on the number of
// rows), each block by one goroutine in row order, and the blocks are then added in order.
const (
	maxColBlocks = 64
	minBlockRows = 8
)

// blockColSums holds k column sums of length c for each block of rows.
type blockColSums struct {
	k, c, blockRows, blocks int
	part                    []float64 // [blocks][k][c]
}

// colSumParts recycles blockColSums' partial sums: allocated afresh, a backward's few
// hundred KiB were first touched (page faults) inside the column-sum loop.
var colSumParts = sync.Pool{New: func() any { return new([]float64) }}

// newBlockColSums returns the column sums of rows rows, to be released once summed.
func newBlockColSums(rows, c, k int) *blockColSums {
	br := max(minBlockRows, (rows+maxColBlocks-1)/maxColBlocks)
	nb := (rows + br - 1) / br
	p := colSumParts.Get().(*[]float64)
	if cap(*p) < nb*k*c {
		*p = make([]float64, nb*k*c)
	}
	return &blockColSums{k: k, c: c, blockRows: br, blocks: nb, part: (*p)[:nb*k*c]}
}

// release returns the partial sums to colSumParts; s must not be used after.
func (s *blockColSums) release() {
	p := s.part[:0]
	s.part = nil
	colSumParts.Put(&p)
}

// at returns sum i of block blk.
func (s *blockColSums) at(blk, i int) []float64 {
	o := (blk*s.k + i) * s.c
	return s.part[o : o+s.c : o+s.c]
}

// run calls body for each block with its rows [lo, hi), blocks split across goroutines.
func (s *blockColSums) run(rows int, body func(blk, lo, hi int)) {
	parallelFor(s.blocks, max(1, fusedRowGrain/max(1, s.blockRows*s.c)), func(lo, hi int) {
		for b := lo; b < hi; b++ {
			clear(s.part[b*s.k*s.c : (b+1)*s.k*s.c])
			body(b, b*s.blockRows, min((b+1)*s.blockRows, rows))
		}
	})
}

// sumBlocks sets dst (when not nil) to column sum i, adding the blocks in order.
func sumBlocks[T float](s *blockColSums, i int, dst []T) {
	if dst == nil {
		return
	}
	parallelFor(s.c, 1024, func(lo, hi int) {
		acc := make([]float64, hi-lo)
		for b := range s.blocks {
			for j, v := range s.at(b, i)[lo:hi] {
				acc[j] += v
			}
		}
		for j, v := range acc {
			dst[lo+j] = T(v)
		}
	})
}

// addColumns adds row into the column sums acc.
func addColumns[T float](acc []float64, row []T) {
	if r32, ok := any(row).([]float32); ok {
		addCols(acc, r32)
		return
	}
	row = row[:len(acc)]
	for j, v := range row {
		acc[j] += float64(v)
	}
}

// rowAt returns row r of length c of v, or nil when v is nil (an absent operand).
func rowAt[T float](v []T, r, c int) []T {
	if v == nil {
		return nil
	}
	return v[r*c : (r+1)*c : (r+1)*c]
}

// addRowTo sets d = a + b, or d = a when b is nil, and returns d.
func addRowTo[T float](d, a, b []T) []T {
	if b == nil {
		copy(d, a)
		return d
	}
	binaryRow(OpAdd, d, a, b, 1, 1)
	return d
}

// biasAdded returns x + bias in scratch, or x itself when bias is nil.
func biasAdded[T float](scratch, x, bias []T) []T {
	if bias == nil {
		return x
	}
	return addRowTo(scratch, x, bias)
}

// orFilled returns v, or n copies of f when v is nil (an absent weight or bias).
func orFilled[T float](v []T, n int, f T) []T {
	if v != nil {
		return v
	}
	v = make([]T, n)
	for i := range v {
		v[i] = f
	}
	return v
}

// roundRow rounds v's float32 values to dt (BF16 or F16), as storing and loading them
// would; other dtypes are left as they are.
func roundRow[T float](dt DType, v []T) {
	v32, ok := any(v).([]float32)
	if !ok {
		return
	}
	switch dt {
	case BF16:
		for i, x := range v32 {
			v32[i] = BF16FromFloat32(x).Float32()
		}
	case F16:
		for i, x := range v32 {
			v32[i] = F16FromFloat32(x).Float32()
		}
	}
}

func (cpuBackend) ResidualNorm(y, sum, mean, rstd, x, residual, w, b Span, p NormParams) {
	if computeIs64(y.DType) {
		residualNormKernel[float64](y, sum, mean, rstd, x, residual, w, b, p)
	} else {
		residualNormKernel[float32](y, sum, mean, rstd, x, residual, w, b, p)
	}
}

func residualNormKernel[T float](y, sum, mean, rstd, x, residual, w, b Span, p NormParams) {
	xs, res, ys, ss := load[T](x), load[T](residual), output[T](y), output[T](sum)
	means, rstds := output[T](mean), output[T](rstd)
	rows, c := rowCount(x)
	ws, bs := orFilled(load[T](w), c, 1), orFilled(load[T](b), c, 0)
	forRowChunks(rows, c, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			s := rowAt(xs, r, c)
			if res != nil {
				s = addRowTo(rowAt(ss, r, c), s, rowAt(res, r, c))
				roundRow(x.DType, s)
			}
			mu, rs := normStats(s, p)
			normRowT(rowAt(ys, r, c), s, ws, bs, mu, rs)
			if means != nil {
				means[r] = T(mu)
			}
			rstds[r] = T(rs)
		}
	})
	store(y, ys)
	store(sum, ss)
	store(mean, means)
	store(rstd, rstds)
}

// normStats returns the mean (0 for RMSNorm) and reciprocal standard deviation of a row.
func normStats[T float](x []T, p NormParams) (mu, rs float64) {
	c := float64(len(x))
	if x32, ok := any(x).([]float32); ok {
		if !p.RMS {
			_, s := maxSum(x32)
			mu = s / c
		}
		return mu, 1 / math.Sqrt(sqDevSum(x32, mu)/c+p.Eps)
	}
	if !p.RMS {
		for _, v := range x {
			mu += float64(v)
		}
		mu /= c
	}
	var v2 float64
	for _, v := range x {
		d := float64(v) - mu
		v2 += d * d
	}
	return mu, 1 / math.Sqrt(v2/c+p.Eps)
}

// normRowT sets y = (x − mu)·rs·w + b.
func normRowT[T float](y, x, w, b []T, mu, rs float64) {
	if y32, ok := any(y).([]float32); ok {
		normRow(y32, any(x).([]float32), any(w).([]float32), any(b).([]float32), mu, rs)
		return
	}
	x, w, b = x[:len(y)], w[:len(y)], b[:len(y)]
	for j, v := range x {
		y[j] = T((float64(v)-mu)*rs*float64(w[j]) + float64(b[j]))
	}
}

func (cpuBackend) ResidualNormBackward(dx, dw, db, dy, dsum, s, w, mean, rstd Span, p NormParams) {
	if computeIs64(dx.DType) {
		residualNormBackwardKernel[float64](dx, dw, db, dy, dsum, s, w, mean, rstd, p)
	} else {
		residualNormBackwardKernel[float32](dx, dw, db, dy, dsum, s, w, mean, rstd, p)
	}
}

func residualNormBackwardKernel[T float](dx, dw, db, dy, dsum, s, w, mean, rstd Span, p NormParams) {
	ss, dys, dss, dxs := load[T](s), load[T](dy), load[T](dsum), output[T](dx)
	means, rstds := load[T](mean), load[T](rstd)
	dws, dbs := output[T](dw), output[T](db)
	rows, c := rowCount(s)
	ws := orFilled(load[T](w), c, 1)
	k := 0
	if dws != nil || dbs != nil {
		k = 2
	}
	cs := newBlockColSums(rows, c, k)
	cs.run(rows, func(blk, lo, hi int) {
		for r := lo; r < hi; r++ {
			var mu float64
			if means != nil {
				mu = float64(means[r])
			}
			rs := float64(rstds[r])
			sr, dyr, dxr := rowAt(ss, r, c), rowAt(dys, r, c), rowAt(dxs, r, c)
			normBwdRowT(dxr, dyr, sr, ws, mu, rs, p.RMS)
			if dss != nil {
				addRowTo(dxr, dxr, rowAt(dss, r, c))
			}
			if k > 0 {
				normBwdColsT(cs.at(blk, 0), cs.at(blk, 1), dyr, sr, mu, rs)
			}
		}
	})
	sumBlocks(cs, 0, dws)
	sumBlocks(cs, 1, dbs)
	cs.release()
	store(dx, dxs)
	store(dw, dws)
	store(db, dbs)
}

// normBwdRowT sets dx to the gradient of a norm's input row x from dy, with xhat =
// (x − mu)·rs and g = dy·w: rs·(g − mean(g) − xhat·mean(g·xhat)), without the mean(g)
// term for RMSNorm.
func normBwdRowT[T float](dx, dy, x, w []T, mu, rs float64, rms bool) {
	c := float64(len(dx))
	if dx32, ok := any(dx).([]float32); ok {
		dy32, x32, w32 := any(dy).([]float32), any(x).([]float32), any(w).([]float32)
		sg, sgx := normBwdSums(dy32, x32, w32, mu, rs)
		if rms {
			sg = 0
		}
		normBwdRow(dx32, dy32, x32, w32, mu, rs, sg/c, sgx/c)
		return
	}
	dy, x, w = dy[:len(dx)], x[:len(dx)], w[:len(dx)]
	var sg, sgx float64
	for j, v := range x {
		g := float64(dy[j]) * float64(w[j])
		sg += g
		sgx += g * ((float64(v) - mu) * rs)
	}
	sg /= c
	sgx /= c
	if rms {
		sg = 0
	}
	for j, v := range x {
		g := float64(dy[j]) * float64(w[j])
		dx[j] = T(rs * (g - sg - ((float64(v)-mu)*rs)*sgx))
	}
}

// normBwdColsT adds dy·xhat into sw and dy into sb, column by column.
func normBwdColsT[T float](sw, sb []float64, dy, x []T, mu, rs float64) {
	if dy32, ok := any(dy).([]float32); ok {
		normBwdCols(sw, sb, dy32, any(x).([]float32), mu, rs)
		return
	}
	dy, x = dy[:len(sw)], x[:len(sw)]
	for j, v := range x {
		g := float64(dy[j])
		sw[j] += g * ((float64(v) - mu) * rs)
		sb[j] += g
	}
}
