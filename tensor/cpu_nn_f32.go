package tensor

import "math"

// The float32 fast paths of the kernels in cpu_nn.go: the same float64 formulas, with
// each row's passes vectorised by vmath.go.

// softmaxF32 is softmaxKernel for float32 rows without an explicit mask and with a
// non-negative scale (so max(scale·x) = scale·max(x)): the causal limit makes each row's
// allowed keys a prefix, over which the exponentials are vectorised (vmath.go).
func softmaxF32(ys, xs []float32, shape Shape, p SoftmaxParams) {
	n := shape[len(shape)-1]
	rows := len(xs) / max(n, 1)
	parallelFor(rows, max(1, 8192/max(n, 1)), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			lim := causalLimit(shape, r, p.Causal)
			xr, yr := xs[r*n:r*n+lim], ys[r*n:(r+1)*n]
			mx, _ := maxSum(xr)
			m := p.Scale * mx
			if lim == 0 || math.IsInf(m, -1) { // every key masked
				fill := float32(0)
				if p.Log {
					fill = float32(math.Inf(-1))
				}
				for j := range yr {
					yr[j] = fill
				}
				continue
			}
			s := expSum(xr, p.Scale, -m)
			if p.Log {
				ls := math.Log(s)
				for j, v := range xr {
					yr[j] = float32(p.Scale*float64(v) - m - ls)
				}
				for j := lim; j < n; j++ {
					yr[j] = float32(math.Inf(-1))
				}
				continue
			}
			expAffine(yr[:lim], xr, 1/s, p.Scale, -m, 0)
			clear(yr[lim:])
		}
	})
}

// normF32 is normKernel's float32 path: the same row statistics in float64 (the mean from
// a lane-parallel sum), each row's pass vectorised by vmath.go.
func normF32(ys, xs, ws, bs, means, rstds []float32, c int, eps float64, rms bool) {
	ws, bs = onesIfNil(ws, c), zerosIfNil(bs, c)
	rows := len(xs) / max(c, 1)
	parallelFor(rows, max(1, 8192/max(c, 1)), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			xr, yr := xs[r*c:(r+1)*c], ys[r*c:(r+1)*c]
			var mu float64
			if !rms {
				_, sum := maxSum(xr)
				mu = sum / float64(c)
			}
			rs := 1 / math.Sqrt(sqDevSum(xr, mu)/float64(c)+eps)
			normRow(yr, xr, ws, bs, mu, rs)
			if means != nil {
				means[r] = float32(mu)
			}
			rstds[r] = float32(rs)
		}
	})
}

// onesIfNil returns w, or n ones when w is nil (an absent norm weight).
func onesIfNil(w []float32, n int) []float32 {
	if w != nil {
		return w
	}
	w = make([]float32, n)
	for i := range w {
		w[i] = 1
	}
	return w
}

// zerosIfNil returns b, or n zeros when b is nil (an absent norm bias).
func zerosIfNil(b []float32, n int) []float32 {
	if b != nil {
		return b
	}
	return make([]float32, n)
}

// normBackwardF32 is normBackwardKernel's float32 path, vectorised by vmath.go: the same
// float64 formulas, row sums in lane-parallel order, column sums of dw and db in row order
// with one fused multiply-add per term (columns are split at multiples of vmathBlock).
func normBackwardF32(dxs, dws, dbs, dys, xs, ws []float32, c int, rms bool, rowStats func(int) (float64, float64)) {
	ws = onesIfNil(ws, c)
	rows := len(xs) / max(c, 1)
	parallelFor(rows, max(1, 8192/max(c, 1)), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			xr, dyr, dxr := xs[r*c:(r+1)*c], dys[r*c:(r+1)*c], dxs[r*c:(r+1)*c]
			mu, rs := rowStats(r)
			sg, sgx := normBwdSums(dyr, xr, ws, mu, rs)
			sg /= float64(c)
			sgx /= float64(c)
			if rms {
				sg = 0 // RMSNorm subtracts no mean
			}
			normBwdRow(dxr, dyr, xr, ws, mu, rs, sg, sgx)
		}
	})
	if dws == nil && dbs == nil {
		return
	}
	parallelBlocks(c, 64, func(lo, hi int) {
		sw, sb := make([]float64, hi-lo), make([]float64, hi-lo)
		for r := 0; r < rows; r++ {
			mu, rs := rowStats(r)
			normBwdCols(sw, sb, dys[r*c+lo:r*c+hi], xs[r*c+lo:r*c+hi], mu, rs)
		}
		for j := range sw {
			if dws != nil {
				dws[lo+j] = float32(sw[j])
			}
			if dbs != nil {
				dbs[lo+j] = float32(sb[j])
			}
		}
	})
}
