package tensor

import (
	"fmt"
	"math"
)

// Row-wise kernels accumulate in float64 whatever the compute type, and split rows (never
// a row's reduction) across goroutines, so results do not depend on the number of threads.

func (cpuBackend) Softmax(y, x, mask Span, p SoftmaxParams) {
	if computeIs64(y.DType) {
		softmaxKernel[float64](y, x, mask, p)
	} else {
		softmaxKernel[float32](y, x, mask, p)
	}
}

// rowMaskOffsets returns, for each row of a tensor of shape, the offset of the row's mask
// and the mask's stride along the row.
func rowMaskOffsets(shape Shape, mask Span) ([]int, int) {
	if mask.Empty() {
		return nil, 0
	}
	offs := make([]int, 0, shape.Numel()/max(1, shape[len(shape)-1]))
	var inner int
	forEachRow(shape, [][]int{BroadcastStrides(mask.Shape, shape)}, func(_ int, o []int, _ int, in []int) {
		offs = append(offs, o[0])
		inner = in[0]
	})
	return offs, inner
}

// causalLimit returns, for row r of scores shaped [..., Tq, Tk], the number of keys that
// query may see (all Tk when not causal).
func causalLimit(shape Shape, r int, causal bool) int {
	tk := shape[len(shape)-1]
	if !causal {
		return tk
	}
	tq := 1
	if len(shape) >= 2 {
		tq = shape[len(shape)-2]
	}
	return min(tk, max(0, r%tq+tk-tq+1))
}

func softmaxKernel[T float](y, x, mask Span, p SoftmaxParams) {
	xs, ys := load[T](x), output[T](y)
	if x32, ok := any(xs).([]float32); ok && mask.Empty() && p.Scale >= 0 {
		softmaxF32(any(ys).([]float32), x32, x.Shape, p)
		store(y, ys)
		return
	}
	ms := load[float64](mask)
	moffs, mstride := rowMaskOffsets(x.Shape, mask)
	n := x.Shape[len(x.Shape)-1]
	rows := x.Numel() / max(n, 1)
	parallelFor(rows, max(1, 8192/max(n, 1)), func(lo, hi int) {
		allowed := make([]bool, n)
		for r := lo; r < hi; r++ {
			xr, yr := xs[r*n:(r+1)*n], ys[r*n:(r+1)*n]
			lim := causalLimit(x.Shape, r, p.Causal)
			m := math.Inf(-1)
			for j := range xr {
				allowed[j] = j < lim && (ms == nil || ms[moffs[r]+j*mstride] == 0)
				if allowed[j] {
					m = max(m, p.Scale*float64(xr[j]))
				}
			}
			if math.IsInf(m, -1) { // every key masked
				fill := 0.0
				if p.Log {
					fill = math.Inf(-1)
				}
				for j := range yr {
					yr[j] = T(fill)
				}
				continue
			}
			var s float64
			for j := range xr {
				if allowed[j] {
					s += math.Exp(p.Scale*float64(xr[j]) - m)
				}
			}
			ls := math.Log(s)
			for j := range xr {
				switch {
				case !allowed[j] && p.Log:
					yr[j] = T(math.Inf(-1))
				case !allowed[j]:
					yr[j] = 0
				case p.Log:
					yr[j] = T(p.Scale*float64(xr[j]) - m - ls)
				default:
					yr[j] = T(math.Exp(p.Scale*float64(xr[j])-m) / s)
				}
			}
		}
	})
	store(y, ys)
}

func (cpuBackend) SoftmaxBackward(dx, y, dy Span, p SoftmaxParams) {
	if computeIs64(dx.DType) {
		softmaxBackwardKernel[float64](dx, y, dy, p)
	} else {
		softmaxBackwardKernel[float32](dx, y, dy, p)
	}
}

func softmaxBackwardKernel[T float](dx, y, dy Span, p SoftmaxParams) {
	ys, dys, dxs := load[T](y), load[T](dy), output[T](dx)
	n := y.Shape[len(y.Shape)-1]
	rows := y.Numel() / max(n, 1)
	if y32, ok := any(ys).([]float32); ok && !p.Log { // vectorised (vmath.go), same formulas
		dy32, dx32 := any(dys).([]float32), any(dxs).([]float32)
		parallelFor(rows, max(1, 8192/max(n, 1)), func(lo, hi int) {
			for r := lo; r < hi; r++ {
				yr, dyr := y32[r*n:(r+1)*n], dy32[r*n:(r+1)*n]
				softmaxBwdRow(dx32[r*n:(r+1)*n], yr, dyr, p.Scale, dot(dyr, yr))
			}
		})
		store(dx, dxs)
		return
	}
	parallelFor(rows, max(1, 8192/max(n, 1)), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			yr, dyr, dxr := ys[r*n:(r+1)*n], dys[r*n:(r+1)*n], dxs[r*n:(r+1)*n]
			var s float64
			if p.Log {
				for j := range yr {
					if !math.IsInf(float64(yr[j]), -1) {
						s += float64(dyr[j])
					}
				}
				for j := range yr {
					if math.IsInf(float64(yr[j]), -1) {
						dxr[j] = 0
					} else {
						dxr[j] = T(p.Scale * (float64(dyr[j]) - math.Exp(float64(yr[j]))*s))
					}
				}
				continue
			}
			for j := range yr {
				s += float64(dyr[j]) * float64(yr[j])
			}
			for j := range yr {
				dxr[j] = T(p.Scale * float64(yr[j]) * (float64(dyr[j]) - s))
			}
		}
	})
	store(dx, dxs)
}

func (cpuBackend) LayerNorm(y, mean, rstd, x, w, b Span, eps float64) {
	if computeIs64(y.DType) {
		normKernel[float64](y, mean, rstd, x, w, b, eps, false)
	} else {
		normKernel[float32](y, mean, rstd, x, w, b, eps, false)
	}
}

func (cpuBackend) RMSNorm(y, rstd, x, w Span, eps float64) {
	if computeIs64(y.DType) {
		normKernel[float64](y, Span{}, rstd, x, w, Span{}, eps, true)
	} else {
		normKernel[float32](y, Span{}, rstd, x, w, Span{}, eps, true)
	}
}

// normKernel is LayerNorm, or RMSNorm (no mean subtraction, no bias) when rms is set.
func normKernel[T float](y, mean, rstd, x, w, b Span, eps float64, rms bool) {
	xs, ys := load[T](x), output[T](y)
	ws, bs := load[T](w), load[T](b)
	means, rstds := output[T](mean), output[T](rstd)
	c := x.Shape[len(x.Shape)-1]
	rows := x.Numel() / max(c, 1)
	if x32, ok := any(xs).([]float32); ok {
		normF32(any(ys).([]float32), x32, any(ws).([]float32), any(bs).([]float32),
			any(means).([]float32), any(rstds).([]float32), c, eps, rms)
		store(y, ys)
		store(mean, means)
		store(rstd, rstds)
		return
	}
	parallelFor(rows, max(1, 8192/max(c, 1)), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			xr, yr := xs[r*c:(r+1)*c], ys[r*c:(r+1)*c]
			var mu float64
			if !rms {
				for _, v := range xr {
					mu += float64(v)
				}
				mu /= float64(c)
			}
			var v2 float64
			for _, v := range xr {
				d := float64(v) - mu
				v2 += d * d
			}
			rs := 1 / math.Sqrt(v2/float64(c)+eps)
			for j, v := range xr {
				o := (float64(v) - mu) * rs
				if ws != nil {
					o *= float64(ws[j])
				}
				if bs != nil {
					o += float64(bs[j])
				}
				yr[j] = T(o)
			}
			if means != nil {
				means[r] = T(mu)
			}
			rstds[r] = T(rs)
		}
	})
	store(y, ys)
	store(mean, means)
	store(rstd, rstds)
}

func (cpuBackend) LayerNormBackward(dx, dw, db, dy, x, w, mean, rstd Span) {
	if computeIs64(dx.DType) {
		normBackwardKernel[float64](dx, dw, db, dy, x, w, mean, rstd)
	} else {
		normBackwardKernel[float32](dx, dw, db, dy, x, w, mean, rstd)
	}
}

func (cpuBackend) RMSNormBackward(dx, dw, dy, x, w, rstd Span) {
	if computeIs64(dx.DType) {
		normBackwardKernel[float64](dx, dw, Span{}, dy, x, w, Span{}, rstd)
	} else {
		normBackwardKernel[float32](dx, dw, Span{}, dy, x, w, Span{}, rstd)
	}
}

// normBackwardKernel is LayerNorm's backward, or RMSNorm's when mean is empty.
func normBackwardKernel[T float](dx, dw, db, dy, x, w, mean, rstd Span) {
	xs, dys, ws := load[T](x), load[T](dy), load[T](w)
	means, rstds := load[T](mean), load[T](rstd)
	dxs, dws, dbs := output[T](dx), output[T](dw), output[T](db)
	c := x.Shape[len(x.Shape)-1]
	rows := x.Numel() / max(c, 1)
	rowStats := func(r int) (mu, rs float64) {
		if means != nil {
			mu = float64(means[r])
		}
		return mu, float64(rstds[r])
	}
	if x32, ok := any(xs).([]float32); ok {
		normBackwardF32(any(dxs).([]float32), any(dws).([]float32), any(dbs).([]float32),
			any(dys).([]float32), x32, any(ws).([]float32), c, means == nil, rowStats)
		store(dx, dxs)
		store(dw, dws)
		store(db, dbs)
		return
	}
	parallelFor(rows, max(1, 8192/max(c, 1)), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			xr, dyr, dxr := xs[r*c:(r+1)*c], dys[r*c:(r+1)*c], dxs[r*c:(r+1)*c]
			mu, rs := rowStats(r)
			var sg, sgx float64 // Σ dxhat, Σ dxhat·xhat
			for j, v := range xr {
				g := float64(dyr[j])
				if ws != nil {
					g *= float64(ws[j])
				}
				sg += g
				sgx += g * ((float64(v) - mu) * rs)
			}
			sg /= float64(c)
			sgx /= float64(c)
			if means == nil {
				sg = 0 // RMSNorm subtracts no mean
			}
			for j, v := range xr {
				g := float64(dyr[j])
				if ws != nil {
					g *= float64(ws[j])
				}
				dxr[j] = T(rs * (g - sg - ((float64(v)-mu)*rs)*sgx))
			}
		}
	})
	if dws != nil || dbs != nil {
		// Columns split across goroutines; each column sums its rows in order, walking
		// the rows contiguously.
		parallelFor(c, 64, func(lo, hi int) {
			sw, sb := make([]float64, hi-lo), make([]float64, hi-lo)
			for r := 0; r < rows; r++ {
				mu, rs := rowStats(r)
				xr, dyr := xs[r*c+lo:r*c+hi], dys[r*c+lo:r*c+hi]
				for j, v := range xr {
					g := float64(dyr[j])
					sw[j] += g * ((float64(v) - mu) * rs)
					sb[j] += g
				}
			}
			for j := range sw {
				if dws != nil {
					dws[lo+j] = T(sw[j])
				}
				if dbs != nil {
					dbs[lo+j] = T(sb[j])
				}
			}
		})
	}
	store(dx, dxs)
	store(dw, dws)
	store(db, dbs)
}

func (cpuBackend) Embedding(dst, w, ids Span) {
	c := w.Shape[1]
	v := w.Shape[0]
	sz := w.DType.Size()
	src, out := rawBytes(w), rawBytes(dst)
	for i, id := range indices(ids) {
		if id < 0 || id >= v {
			panic(fmt.Sprintf("tensor: Embedding: id %d at position %d out of range [0, %d)", id, i, v))
		}
		copy(out[i*c*sz:(i+1)*c*sz], src[id*c*sz:(id+1)*c*sz])
	}
}

func (cpuBackend) EmbeddingBackward(dw, dy, ids Span) {
	if computeIs64(dw.DType) {
		embeddingBackwardKernel[float64](dw, dy, ids)
	} else {
		embeddingBackwardKernel[float32](dw, dy, ids)
	}
}

func embeddingBackwardKernel[T float](dw, dy, ids Span) {
	dws, dys := load[T](dw), load[T](dy)
	c, v := dw.Shape[1], dw.Shape[0]
	ids64 := indices(ids)
	for i, id := range ids64 {
		if id < 0 || id >= v {
			panic(fmt.Sprintf("tensor: Embedding backward: id %d at position %d out of range [0, %d)", id, i, v))
		}
	}
	// Columns split across goroutines, at least 64 a chunk so that binaryRow's vector loop
	// does most of a row; each row of dw gets its ids' rows in order.
	parallelFor(c, max(64, (1<<15)/max(1, len(ids64))), func(lo, hi int) {
		for i, id := range ids64 {
			row := dws[id*c+lo : id*c+hi]
			binaryRow(OpAdd, row, row, dys[i*c+lo:i*c+hi], 1, 1)
		}
	})
	store(dw, dws)
}

func (cpuBackend) CrossEntropy(loss, lse, logits, targets Span, p CrossEntropyParams) {
	if computeIs64(logits.DType) {
		crossEntropyKernel[float64](loss, lse, logits, targets, p)
	} else {
		crossEntropyKernel[float32](loss, lse, logits, targets, p)
	}
}

func crossEntropyKernel[T float](loss, lse, logits, targets Span, p CrossEntropyParams) {
	xs, ls, lses := load[T](logits), output[T](loss), output[T](lse)
	ts := indices(targets)
	n, v := logits.Shape[0], logits.Shape[1]
	// Check the targets before splitting rows across goroutines: a panic there could not be
	// recovered by the caller.
	for r, t := range ts {
		if (t < 0 || t >= v) && !(p.Ignore && int64(t) == p.IgnoreIndex) {
			panic(fmt.Sprintf("tensor: CrossEntropy: target %d of row %d out of range [0, %d)", t, r, v))
		}
	}
	x32, is32 := any(xs).([]float32)
	parallelFor(n, max(1, 8192/max(v, 1)), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			t := ts[r]
			if p.Ignore && int64(t) == p.IgnoreIndex {
				ls[r], lses[r] = 0, 0
				continue
			}
			xr := xs[r*v : (r+1)*v]
			var m, sum, s float64
			if is32 { // vectorised (vmath.go), same formulas
				m, sum = maxSum(x32[r*v : (r+1)*v])
				s = expSum(x32[r*v:(r+1)*v], 1, -m)
			} else {
				m = math.Inf(-1)
				for _, x := range xr {
					m = max(m, float64(x))
					sum += float64(x)
				}
				for _, x := range xr {
					s += math.Exp(float64(x) - m)
				}
			}
			l := m + math.Log(s)
			nll := l - float64(xr[t])
			eps := p.LabelSmoothing
			ls[r] = T((1-eps)*nll + eps*(l-sum/float64(v)))
			lses[r] = T(l)
		}
	})
	store(loss, ls)
	store(lse, lses)
}

func (cpuBackend) CrossEntropyBackward(dlogits, logits, targets, lse, dloss Span, p CrossEntropyParams) {
	if computeIs64(logits.DType) {
		crossEntropyBackwardKernel[float64](dlogits, logits, targets, lse, dloss, p)
	} else {
		crossEntropyBackwardKernel[float32](dlogits, logits, targets, lse, dloss, p)
	}
}

func crossEntropyBackwardKernel[T float](dlogits, logits, targets, lse, dloss Span, p CrossEntropyParams) {
	xs, lses, dls, dxs := load[T](logits), load[T](lse), load[T](dloss), output[T](dlogits)
	ts := indices(targets)
	n, v := logits.Shape[0], logits.Shape[1]
	eps := p.LabelSmoothing
	parallelFor(n, max(1, 8192/max(v, 1)), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			dr := dxs[r*v : (r+1)*v]
			t := ts[r]
			if p.Ignore && int64(t) == p.IgnoreIndex {
				clear(dr)
				continue
			}
			xr := xs[r*v : (r+1)*v]
			l, g := float64(lses[r]), float64(dls[r])
			if d32, ok := any(dr).([]float32); ok {
				// g·(e^(x−l) − eps/V), vectorised, then the target's −(1−eps).
				x32 := any(xr).([]float32)
				expAffine(d32, x32, g, 1, -l, -g*eps/float64(v))
				if t >= 0 && t < v {
					d32[t] = float32(g * (math.Exp(float64(x32[t])-l) - eps/float64(v) - (1 - eps)))
				}
				continue
			}
			for j, x := range xr {
				q := math.Exp(float64(x)-l) - eps/float64(v)
				if j == t {
					q -= 1 - eps
				}
				dr[j] = T(g * q)
			}
		}
	})
	store(dlogits, dxs)
}
