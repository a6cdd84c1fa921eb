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
	xhat := func(r, j int) float64 {
		mu := 0.0
		if means != nil {
			mu = float64(means[r])
		}
		return (float64(xs[r*c+j]) - mu) * float64(rstds[r])
	}
	parallelFor(rows, max(1, 8192/max(c, 1)), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			var sg, sgx float64 // Σ dxhat, Σ dxhat·xhat
			for j := 0; j < c; j++ {
				g := float64(dys[r*c+j])
				if ws != nil {
					g *= float64(ws[j])
				}
				sg += g
				sgx += g * xhat(r, j)
			}
			sg /= float64(c)
			sgx /= float64(c)
			if means == nil {
				sg = 0 // RMSNorm subtracts no mean
			}
			rs := float64(rstds[r])
			for j := 0; j < c; j++ {
				g := float64(dys[r*c+j])
				if ws != nil {
					g *= float64(ws[j])
				}
				dxs[r*c+j] = T(rs * (g - sg - xhat(r, j)*sgx))
			}
		}
	})
	if dws != nil || dbs != nil {
		parallelFor(c, 64, func(lo, hi int) {
			for j := lo; j < hi; j++ {
				var sw, sb float64
				for r := 0; r < rows; r++ {
					g := float64(dys[r*c+j])
					sw += g * xhat(r, j)
					sb += g
				}
				if dws != nil {
					dws[j] = T(sw)
				}
				if dbs != nil {
					dbs[j] = T(sb)
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
	for i, id := range indices(ids) {
		if id < 0 || id >= v {
			panic(fmt.Sprintf("tensor: Embedding backward: id %d at position %d out of range [0, %d)", id, i, v))
		}
		row, g := dws[id*c:(id+1)*c], dys[i*c:(i+1)*c]
		for j := range row {
			row[j] += g[j]
		}
	}
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
	parallelFor(n, max(1, 8192/max(v, 1)), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			t := ts[r]
			if p.Ignore && int64(t) == p.IgnoreIndex {
				ls[r], lses[r] = 0, 0
				continue
			}
			xr := xs[r*v : (r+1)*v]
			m := math.Inf(-1)
			var sum float64
			for _, x := range xr {
				m = max(m, float64(x))
				sum += float64(x)
			}
			var s float64
			for _, x := range xr {
				s += math.Exp(float64(x) - m)
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
