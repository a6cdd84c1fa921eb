package tensor

import "math"

// The CPU backend's bias + dropout + residual and rotary embedding RowKernels.

func (cpuBackend) BiasDropoutResidual(y, x, bias, residual Span, p DropoutParams) {
	if computeIs64(y.DType) {
		biasDropoutKernel[float64](y, x, bias, residual, p)
	} else {
		biasDropoutKernel[float32](y, x, bias, residual, p)
	}
}

func biasDropoutKernel[T float](y, x, bias, residual Span, p DropoutParams) {
	xs, bs, res, ys := load[T](x), load[T](bias), load[T](residual), output[T](y)
	rows, c := rowCount(x)
	starts := dropoutRowStarts(x.Shape, p)
	forRowChunks(rows, c, func(lo, hi int) {
		var m []T // the dropout mask of a row; none without dropout (inference)
		if starts != nil {
			m = make([]T, c)
		}
		for r := lo; r < hi; r++ {
			yr := rowAt(ys, r, c)
			h := biasAdded(yr, rowAt(xs, r, c), bs)
			if starts != nil {
				dropRow(m, starts[r], p)
				binaryRow(OpMul, yr, h, m, 1, 1)
				h = yr
			}
			addRowTo(yr, h, rowAt(res, r, c))
		}
	})
	store(y, ys)
}

func (cpuBackend) BiasDropoutBackward(dx, dbias, dy Span, p DropoutParams) {
	if computeIs64(dy.DType) {
		biasDropoutBackwardKernel[float64](dx, dbias, dy, p)
	} else {
		biasDropoutBackwardKernel[float32](dx, dbias, dy, p)
	}
}

func biasDropoutBackwardKernel[T float](dx, dbias, dy Span, p DropoutParams) {
	dys, dxs, dbs := load[T](dy), output[T](dx), output[T](dbias)
	rows, c := rowCount(dy)
	starts := dropoutRowStarts(dy.Shape, p)
	cs := newBlockColSums(rows, c, min(1, len(dbs)))
	cs.run(rows, func(blk, lo, hi int) {
		m := make([]T, c)
		for r := lo; r < hi; r++ {
			dxr, dyr := rowAt(dxs, r, c), rowAt(dys, r, c)
			switch {
			case starts != nil:
				dropRow(m, starts[r], p)
				binaryRow(OpMul, dxr, dyr, m, 1, 1)
			case dxs == nil: // p = 0 without dx: the bias's sums only
				dxr = dyr
			default:
				copy(dxr, dyr)
			}
			if dbs != nil {
				addColumns(cs.at(blk, 0), dxr)
			}
		}
	})
	sumBlocks(cs, 0, dbs)
	cs.release()
	store(dx, dxs)
	store(dbias, dbs)
}

// dropoutRowStarts returns, for each row of a span of the given shape that is the region
// of p.Full starting at p.Start, the index in the full tensor of the row's first element
// (the row's elements follow it), or nil when p.P is 0.
func dropoutRowStarts(shape Shape, p DropoutParams) []uint64 {
	if p.P == 0 {
		return nil
	}
	fs := p.Full.Strides()
	off := 0
	for d, s := range p.Start {
		off += s * fs[d]
	}
	n := len(shape)
	starts := make([]uint64, shape.Numel()/max(1, shape[n-1]))
	idx := make([]int, n-1)
	for r := range starts {
		starts[r] = uint64(off)
		for d := n - 2; d >= 0; d-- { // the next row's index, last dim fastest
			idx[d]++
			off += fs[d]
			if idx[d] < shape[d] {
				break
			}
			off -= idx[d] * fs[d]
			idx[d] = 0
		}
	}
	return starts
}

// dropRow sets m to the dropout mask of the elements whose full-tensor indices start at g:
// 0 where the uniform draw (RNG's recipe: a 53-bit fraction from block i/2's words
// 2(i mod 2) and 2(i mod 2)+1) is below p.P, else 1/(1−p.P). It compares the fraction's
// integer u with ⌈p.P·2^53⌉: u·2^−53 < P exactly when u < ⌈P·2^53⌉. With AVX-512, the
// blocks of whole groups of 16 elements that start at an even index are drawn eight at a
// time (dropKeepAVX512), the rest one by one (philoxBlock); both give the same bits.
func dropRow[T float](m []T, g uint64, p DropoutParams) {
	thresh, scale := uint64(math.Ceil(p.P*(1<<53))), T(1/(1-p.P))
	j := 0
	if hasVMathAVX512 {
		if g%2 == 1 && len(m) > 0 {
			dropScalar(m[:1], g, p.Key, thresh, scale)
			j = 1
		}
		var bits [2 * dropGroups]uint8 // keep bits of up to dropGroups groups of 16
		for len(m)-j >= 16 {
			n := min((len(m)-j)/16, dropGroups)
			dropKeepAVX512(bits[:2*n], (g+uint64(j))/2, p.Key[0], p.Key[1], thresh)
			for k, b := range bits[:2*n] {
				base := j + 16*(k/2) + k%2 // even elements from even bytes, odd from odd
				for e := range 8 {
					m[base+2*e] = scale * T(b>>e&1)
				}
			}
			j += 16 * n
		}
	}
	dropScalar(m[j:], g+uint64(j), p.Key, thresh, scale)
}

// dropGroups is the number of 16-element groups dropRow draws per dropKeepAVX512 call.
const dropGroups = 32

// dropScalar is dropRow's portable form, one Philox block per two elements.
func dropScalar[T float](m []T, g uint64, key [2]uint32, thresh uint64, scale T) {
	var blk [4]uint32
	for j := range m {
		i := g + uint64(j)
		if j == 0 || i%2 == 0 {
			blk = philoxBlock(i/2, key)
		}
		h := 2 * (i % 2)
		if uint64(blk[h])<<21|uint64(blk[h+1])>>11 < thresh {
			m[j] = 0
		} else {
			m[j] = scale
		}
	}
}

func (cpuBackend) RotaryEmbedding(y, x Span, p RoPEParams) {
	if computeIs64(y.DType) {
		ropeKernel[float64](y, x, p)
	} else {
		ropeKernel[float32](y, x, p)
	}
}

// ropeKernel rotates the rows of x [..., T, HS]. Each product is rounded to T before the
// sum, as the reference's Mul and Add round them: y1 = T(x1·cos) + T(−(x2·sin)),
// y2 = T(x2·cos) + T(x1·sin), with cos and sin rounded to T (sin negated for Inverse).
func ropeKernel[T float](y, x Span, p RoPEParams) {
	xs, ys := load[T](x), output[T](y)
	rows, hs := rowCount(x)
	t, half := x.Shape[len(x.Shape)-2], hs/2
	cos, sin := make([]T, t*half), make([]T, t*half)
	sign := 1.0
	if p.Inverse {
		sign = -1
	}
	parallelFor(t, max(1, 512/max(half, 1)), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			for j := range half {
				c, s := ropeCosSin(p.Positions[i], j, hs, p.Theta)
				cos[i*half+j], sin[i*half+j] = T(c), T(sign*s)
			}
		}
	})
	forRowChunks(rows, hs, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			xr, yr := rowAt(xs, r, hs), rowAt(ys, r, hs)
			c, s := rowAt(cos, r%t, half), rowAt(sin, r%t, half)
			x1, x2, y1, y2 := xr[:half], xr[half:], yr[:half], yr[half:]
			for j, cj := range c {
				a, b := x1[j], x2[j] // read both before writing: y may be x
				y1[j] = T(a*cj) + T(-(b * s[j]))
				y2[j] = T(b*cj) + T(a*s[j])
			}
		}
	})
	store(y, ys)
}
