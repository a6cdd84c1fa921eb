package tensor

import "math"

// The CPU backend's activation RowKernels: bias + GeLU and bias + SwiGLU.

func (cpuBackend) BiasActivation(act UnaryOp, y, x, bias Span) {
	if computeIs64(y.DType) {
		biasActKernel[float64](act, y, x, bias)
	} else {
		biasActKernel[float32](act, y, x, bias)
	}
}

func biasActKernel[T float](act UnaryOp, y, x, bias Span) {
	xs, bs, ys := load[T](x), load[T](bias), output[T](y)
	rows, c := rowCount(x)
	forRowChunks(rows, c, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			yr := rowAt(ys, r, c)
			biasActRow(act, yr, rowAt(xs, r, c), bs)
		}
	})
	store(y, ys)
}

// biasActRow sets y = act(x + bias) (bias may be nil); y may be x. The float32 tanh GeLU
// adds the bias inside its vector loop.
func biasActRow[T float](act UnaryOp, y, x, bias []T) {
	if y32, ok := any(y).([]float32); ok && act == OpGeLUTanh && bias != nil {
		geluTanhBias(y32, any(x).([]float32), any(bias).([]float32))
		return
	}
	actRow(act, y, biasAdded(y, x, bias))
}

// biasActBackwardRow sets dx = dy·act'(x + bias) (bias may be nil), using h as scratch.
func biasActBackwardRow[T float](act UnaryOp, dx, h, x, bias, dy []T) {
	if dx32, ok := any(dx).([]float32); ok && act == OpGeLUTanh && bias != nil {
		geluTanhBiasBackward(dx32, any(x).([]float32), any(bias).([]float32), any(dy).([]float32))
		return
	}
	actBackwardRow(act, dx, biasAdded(h, x, bias), dy)
}

// actRow sets y = act(h); y may be h.
func actRow[T float](act UnaryOp, y, h []T) {
	if y32, ok := any(y).([]float32); ok && act == OpGeLUTanh {
		geluTanh(y32, any(h).([]float32))
		return
	}
	f := unaryFn(act, 0)
	h = h[:len(y)]
	for j, v := range h {
		y[j] = T(f(float64(v)))
	}
}

func (cpuBackend) BiasActivationBackward(act UnaryOp, dx, dbias, dy, x, bias Span) {
	if computeIs64(dx.DType) {
		biasActBackwardKernel[float64](act, dx, dbias, dy, x, bias)
	} else {
		biasActBackwardKernel[float32](act, dx, dbias, dy, x, bias)
	}
}

func biasActBackwardKernel[T float](act UnaryOp, dx, dbias, dy, x, bias Span) {
	xs, bs, dys, dxs, dbs := load[T](x), load[T](bias), load[T](dy), output[T](dx), output[T](dbias)
	rows, c := rowCount(x)
	cs := newBlockColSums(rows, c, min(1, len(dbs)))
	cs.run(rows, func(blk, lo, hi int) {
		h := make([]T, c)
		for r := lo; r < hi; r++ {
			dxr := rowAt(dxs, r, c)
			biasActBackwardRow(act, dxr, h, rowAt(xs, r, c), bs, rowAt(dys, r, c))
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

// actBackwardRow sets dx = dy·act'(h).
func actBackwardRow[T float](act UnaryOp, dx, h, dy []T) {
	if dx32, ok := any(dx).([]float32); ok && act == OpGeLUTanh {
		geluTanhBackward(dx32, any(h).([]float32), any(dy).([]float32))
		return
	}
	g := unaryGrad(act, 0)
	h, dy = h[:len(dx)], dy[:len(dx)]
	for j, v := range h {
		dx[j] = T(float64(dy[j]) * g(float64(v), 0))
	}
}

func (cpuBackend) SwiGLU(y, gate, up, gateBias, upBias Span) {
	if computeIs64(y.DType) {
		swigluKernel[float64](y, gate, up, gateBias, upBias)
	} else {
		swigluKernel[float32](y, gate, up, gateBias, upBias)
	}
}

// SwiGLU's rows: with hg = gate + gateBias, hu = up + upBias and e = e^(−hg) (float32 for
// float32 rows, from vmath's vectorised exponential), σ(hg) = 1/(1+e), and in float64
//
//	y     = hg/(1+e)·hu            (silu(hg)·hu)
//	dup   = dy·(hg·σ(hg))
//	dgate = (dy·hu)·σ(hg)·(1 + hg·(1−σ(hg)))
func swigluKernel[T float](y, gate, up, gateBias, upBias Span) {
	gs, us, gbs, ubs, ys := load[T](gate), load[T](up), load[T](gateBias), load[T](upBias), output[T](y)
	rows, c := rowCount(gate)
	forRowChunks(rows, c, func(lo, hi int) {
		hgs, hus, e := make([]T, c), make([]T, c), make([]T, c)
		for r := lo; r < hi; r++ {
			hg, hu := biasAdded(hgs, rowAt(gs, r, c), gbs), biasAdded(hus, rowAt(us, r, c), ubs)
			expNeg(e, hg)
			yr := rowAt(ys, r, c)
			for j, g := range hg {
				yr[j] = T(float64(g) / (1 + float64(e[j])) * float64(hu[j]))
			}
		}
	})
	store(y, ys)
}

// expNeg sets e = e^(−h), vectorised and rounded to float32 for float32 rows.
func expNeg[T float](e, h []T) {
	if e32, ok := any(e).([]float32); ok {
		expAffine(e32, any(h).([]float32), 1, -1, 0, 0)
		return
	}
	h = h[:len(e)]
	for j, v := range h {
		e[j] = T(math.Exp(-float64(v)))
	}
}

func (cpuBackend) SwiGLUBackward(dgate, dup, dgateBias, dupBias, dy, gate, up, gateBias, upBias Span) {
	if computeIs64(dgate.DType) {
		swigluBackwardKernel[float64](dgate, dup, dgateBias, dupBias, dy, gate, up, gateBias, upBias)
	} else {
		swigluBackwardKernel[float32](dgate, dup, dgateBias, dupBias, dy, gate, up, gateBias, upBias)
	}
}

func swigluBackwardKernel[T float](dgate, dup, dgateBias, dupBias, dy, gate, up, gateBias, upBias Span) {
	gs, us, gbs, ubs, dys := load[T](gate), load[T](up), load[T](gateBias), load[T](upBias), load[T](dy)
	dgs, dus, dgbs, dubs := output[T](dgate), output[T](dup), output[T](dgateBias), output[T](dupBias)
	rows, c := rowCount(gate)
	k := 0
	if dgbs != nil || dubs != nil {
		k = 2
	}
	cs := newBlockColSums(rows, c, k)
	cs.run(rows, func(blk, lo, hi int) {
		hgs, hus, e := make([]T, c), make([]T, c), make([]T, c)
		for r := lo; r < hi; r++ {
			hg, hu := biasAdded(hgs, rowAt(gs, r, c), gbs), biasAdded(hus, rowAt(us, r, c), ubs)
			expNeg(e, hg)
			dyr, dgr, dur := rowAt(dys, r, c), rowAt(dgs, r, c), rowAt(dus, r, c)
			for j, g := range hg {
				hgj, d := float64(g), float64(dyr[j])
				sig := 1 / (1 + float64(e[j]))
				dur[j] = T(d * (hgj * sig))
				dgr[j] = T(d * float64(hu[j]) * (sig * (1 + hgj*(1-sig))))
			}
			if dgbs != nil {
				addColumns(cs.at(blk, 0), dgr)
			}
			if dubs != nil {
				addColumns(cs.at(blk, 1), dur)
			}
		}
	})
	sumBlocks(cs, 0, dgbs)
	sumBlocks(cs, 1, dubs)
	cs.release()
	store(dgate, dgs)
	store(dup, dus)
	store(dgateBias, dgbs)
	store(dupBias, dubs)
}
