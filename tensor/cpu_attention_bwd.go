package tensor

import "math"

// The backward kernel of the CPU backend's fused attention (see cpu_attention.go).

// attnBwd is the state of one backward call.
type attnBwd[T float] struct {
	*attnCall[T]
	dout       []T       // [B, NH, Tq, HS], or [B, Tq, NH·HS] (attnGeom.ostr)
	d          []float64 // [B, NH, Tq]: rowsum(dout ∘ out) − dlse
	dq, dk, dv []T       // the gradients, in compute type
	dbias      []T       // bias's shape, or nil
	dqPart     [][]T     // per key range, partial dQ [B, NH, Tq, HS]; the first is dq
	dkh, dvh   []T       // per query head [B, NH, Tk, HS] when GQA shares a key/value head
	splits     int       // key ranges per head
	groups     [][]int   // heads b·NH+h computed one after another (sharing bias gradient)
}

func (c *attnCall[T]) backward(g AttentionGrads) {
	w := &attnBwd[T]{attnCall: c, dout: load[T](g.DOut),
		dq: output[T](g.DQ), dk: output[T](g.DK), dv: output[T](g.DV), dbias: output[T](g.DBias)}
	c.out, c.lse = load[T](c.a.Out), load[T](c.a.LSE)
	w.rowDots(load[T](g.DLSE))
	clear(w.dbias)
	w.plan()
	heads, hs := c.b*c.nh, c.hs
	var scratch []T // AttentionBackwardScratch's, or none
	if !g.Scratch.Empty() {
		scratch = raw[T](g.Scratch)
	}
	take := func(n int) []T {
		if len(scratch) < n {
			return make([]T, n)
		}
		s := scratch[:n:n]
		scratch = scratch[n:]
		return s
	}
	w.dqPart = [][]T{w.dq} // the first key range's partial dQ is dQ itself
	for range w.splits - 1 {
		w.dqPart = append(w.dqPart, take(heads*c.tq*hs))
	}
	if c.per > 1 {
		w.dkh, w.dvh = take(heads*c.tk*hs), take(heads*c.tk*hs)
	}
	n := len(w.groups)
	attnParallel(n*w.splits, 1, func() *attnTiles[T] { return c.newTiles(true) }, func(t *attnTiles[T], it int) {
		for _, bh := range w.groups[it%n] {
			w.head(t, bh, it/n)
		}
	})
	w.reduce()
	store(g.DQ, w.dq)
	store(g.DK, w.dk)
	store(g.DV, w.dv)
	store(g.DBias, w.dbias)
}

// rowDots sets d to rowsum(dout ∘ out) − dlse (dlse nil: zeros).
func (w *attnBwd[T]) rowDots(dlse []T) {
	hs, rows := w.hs, w.b*w.nh*w.tq
	w.d = make([]float64, rows)
	parallelFor(rows, max(1, 8192/max(1, hs)), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			bh := r / w.tq
			off := w.outAt(bh/w.nh, bh%w.nh, r%w.tq)
			w.d[r] = rowDot(w.dout[off:off+hs], w.out[off:off+hs])
			if dlse != nil {
				w.d[r] -= float64(dlse[r])
			}
		}
	})
}

// plan sets the work items: groups of heads whose bias gradient elements coincide (a bias
// broadcast along B or NH), computed in order by one goroutine, and the number of key
// ranges per head. Both depend on shapes only.
func (w *attnBwd[T]) plan() { w.groups, w.splits = w.backwardPlan(w.dbias != nil) }

// backwardPlan returns the backward's groups of heads and key ranges per head (plan),
// given whether the bias gradient is wanted.
func (g *attnGeom) backwardPlan(dbias bool) (groups [][]int, splits int) {
	index := map[int]int{}
	for bh := 0; bh < g.b*g.nh; bh++ {
		key := -1 - bh // its own group
		if dbias {
			key = bh/g.nh*g.bstr[0] + bh%g.nh*g.bstr[1]
		}
		gi, ok := index[key]
		if !ok {
			gi = len(groups)
			index[key] = gi
			groups = append(groups, nil)
		}
		groups[gi] = append(groups[gi], bh)
	}
	splits = 1
	if len(groups) < attnMinItems && (!dbias || g.bstr[3] != 0 || g.tk <= 1) {
		splits = max(1, min(attnKeySplits, g.nkt))
	}
	return groups, splits
}

// AttentionBackwardScratch returns the elements of scratch the backward uses: the partial
// dQ of every key range but the first, and with grouped-query attention each query head's
// dK and dV before they are summed per key/value head.
func (cpuBackend) AttentionBackwardScratch(a AttentionArgs, g AttentionGrads, p AttentionParams) int {
	geo := newAttnGeom[float64](a, p)
	_, splits := geo.backwardPlan(!g.DBias.Empty())
	heads, n := geo.b*geo.nh, 0
	n += (splits - 1) * heads * geo.tq * geo.hs
	if geo.per > 1 {
		n += 2 * heads * geo.tk * geo.hs
	}
	return n
}

// attnKeyTile is a key tile of the backward: its keys, its rows of K and V as B operands
// (packed once for all query tiles on the SIMD path) and its rows of dK and dV.
type attnKeyTile[T float] struct {
	j0, wk    int
	kT, vT, k attnB[T] // Kᵀ and Vᵀ [HS, wk], K [wk, HS]
	dk, dv    []T      // [wk, HS]
	written   bool     // whether dk and dv hold a query tile's contribution yet
}

// head computes the gradients of head bh = b·NH + h from its key range r: dQ (partial
// when the keys are split), dK and dV of its key tiles, its share of dBias. The first
// contribution to a row of dQ, dK or dV is stored, the others added; rows none reach
// are zeroed.
func (w *attnBwd[T]) head(t *attnTiles[T], bh, r int) {
	hs := w.hs
	b, h := bh/w.nh, bh%w.nh
	kv := (b*w.g + h/w.per) * w.tk
	dq := w.dqPart[r][bh*w.tq*hs : (bh+1)*w.tq*hs]
	clear(t.dqDone)
	clear(t.qdoPacked)
	dk, dv := w.dk[kv*hs:(kv+w.tk)*hs], w.dv[kv*hs:(kv+w.tk)*hs]
	if w.per > 1 {
		dk, dv = w.dkh[bh*w.tk*hs:(bh+1)*w.tk*hs], w.dvh[bh*w.tk*hs:(bh+1)*w.tk*hs]
	}
	for kt := r * w.nkt / w.splits; kt < (r+1)*w.nkt/w.splits; kt++ {
		j0 := kt * attnKTile
		wk := min(attnKTile, w.tk-j0)
		k, v := w.k[(kv+j0)*hs:(kv+j0+wk)*hs], w.v[(kv+j0)*hs:(kv+j0+wk)*hs] // [wk, HS]
		key := attnKeyTile[T]{j0: j0, wk: wk, dk: dk[j0*hs : (j0+wk)*hs], dv: dv[j0*hs : (j0+wk)*hs],
			kT: w.operand(t.kT, k, true, hs, wk), vT: w.operand(t.vT, v, true, hs, wk), k: w.operand(t.k, k, false, wk, hs)}
		iStart := 0
		if w.causal {
			iStart = max(0, j0-(w.tk-w.tq))
		}
		for qt := iStart / attnQTile; qt < w.nqt; qt++ {
			w.tile(t, b, h, qt, &key, dq)
		}
		if !key.written {
			clear(key.dk)
			clear(key.dv)
		}
	}
	for qt, done := range t.dqDone {
		if !done {
			clear(dq[qt*attnQTile*hs : min(w.tq, (qt+1)*attnQTile)*hs])
		}
	}
}

// tile adds the contributions of query tile qt and key tile kt of head (b, h) to dq (the
// head's [Tq, HS]) and to the key tile's dK and dV.
func (w *attnBwd[T]) tile(t *attnTiles[T], b, h, qt int, kt *attnKeyTile[T], dq []T) {
	hs, bh, j0 := w.hs, b*w.nh+h, kt.j0
	i0 := qt * attnQTile
	bq := min(attnQTile, w.tq-i0)
	wq := min(kt.wk, w.visible(i0+bq-1)-j0) // keys any query of the tile sees
	if wq <= 0 || w.segs != nil && w.segs.hidden(b, qt, j0/attnKTile) {
		return
	}
	q := w.q[(bh*w.tq+i0)*hs : (bh*w.tq+i0+bq)*hs]   // [bq, HS]
	do, ldo := w.doutRows(t, b, h, i0, bq)           // [bq, HS], rows ldo apart
	s, dp := t.s[:bq*wq], t.dp[:bq*wq]               // [bq, wq]: the probabilities overwrite the scores
	dq1, dk1 := i0+w.tk-w.tq+1-j0, j0-(w.tk-w.tq)-i0 // attnSpan's offsets: queries by keys, keys by queries
	w.product(t, s, q, false, kt.kT, bq, wq, hs, false, w.span(attnCols, dq1))
	w.productLD(t, dp, do, ldo, false, kt.vT, bq, wq, hs, false, w.span(attnCols, dq1))
	pz := s // the probabilities after dropout
	if w.dropP > 0 {
		pz = t.pz[:bq*wq]
	}
	w.rows(t, b, h, i0, bq, j0, wq, pz)
	if !kt.written {
		clear(kt.dk[wq*hs:])
		clear(kt.dv[wq*hs:])
	}
	qN, doN := w.queryTile(t, qt, q, do, ldo, bq)
	w.product(t, kt.dv[:wq*hs], pz, true, doN, wq, hs, bq, kt.written, w.span(attnKSuffix, dk1))
	w.product(t, kt.dk[:wq*hs], dp, true, qN, wq, hs, bq, kt.written, w.span(attnKSuffix, dk1))
	w.product(t, dq[i0*hs:(i0+bq)*hs], dp, false, kt.k, bq, hs, wq, t.dqDone[qt], w.span(attnKPrefix, dq1))
	kt.written, t.dqDone[qt] = true, true
}

// doutRows returns the rows of dOut of queries i0… (bq) of head (b, h) and how far apart
// they are: in place on the SIMD path or when they are contiguous ([B, NH, Tq, HS]), else
// (heads side by side) gathered into t's scratch.
func (w *attnBwd[T]) doutRows(t *attnTiles[T], b, h, i0, bq int) (do []T, ld int) {
	hs, ld, off := w.hs, w.ostr[2], w.outAt(b, h, i0)
	if ld == hs || w.fast {
		return w.dout[off : off+(bq-1)*ld+hs], ld
	}
	if len(t.doRows) < attnQTile*hs {
		t.doRows = make([]T, attnQTile*hs)
	}
	for r := range bq {
		copy(t.doRows[r*hs:(r+1)*hs], w.dout[off+r*ld:off+r*ld+hs])
	}
	return t.doRows[:bq*hs], hs
}

// queryTile returns the rows q ([bq, HS]) and do ([bq, HS], rows ldo apart) of query tile
// qt as the B operands of dK and dV, packed on the SIMD path the first time head's call
// needs them (off it, do's rows are contiguous: doutRows).
func (w *attnBwd[T]) queryTile(t *attnTiles[T], qt int, q, do []T, ldo, bq int) (qN, doN attnB[T]) {
	if !w.fast {
		return w.operand(nil, q, false, bq, w.hs), w.operand(nil, do, false, bq, w.hs)
	}
	slot := w.packedSize(attnQTile)
	qdst, dodst := t.qdo[2*qt*slot:(2*qt+1)*slot], t.qdo[(2*qt+1)*slot:(2*qt+2)*slot]
	if t.qdoPacked[qt] {
		return w.packed(qdst, bq, w.hs), w.packed(dodst, bq, w.hs)
	}
	t.qdoPacked[qt] = true
	return w.operand(qdst, q, false, bq, w.hs), w.operandLD(dodst, do, false, bq, w.hs, ldo)
}

// rows turns the scores t.s and dO·Vᵀ in t.dp of queries i0… (bq) and keys j0… (wq) of
// head (b, h) into the probabilities (in t.s), after dropout pz, and Scale·∂L/∂logits in
// t.dp, adding ∂L/∂logits into the bias gradient. Past the keys a query sees, which the
// products may have left uncomputed, all three are zero.
func (w *attnBwd[T]) rows(t *attnTiles[T], b, h, i0, bq, j0, wq int, pz []T) {
	bh := b*w.nh + h
	s, dp := t.s[:bq*wq], t.dp[:bq*wq] // [bq, wq]: the scores, then the probabilities over them
	gen := w.general(b, i0/attnQTile, j0/attnKTile)
	sc := w.expScale(gen)
	for r := 0; r < bq; r++ {
		i := i0 + r
		lim := min(wq, max(0, w.visible(i)-j0))
		srow, prow, dprow := s[r*wq:r*wq+lim], s[r*wq:(r+1)*wq], dp[r*wq:(r+1)*wq]
		lse := float64(w.lse[bh*w.tq+i])
		if math.IsInf(lse, -1) { // every key masked: no gradient
			lim = 0
		}
		clear(prow[lim:])
		clear(dprow[lim:])
		if lim > 0 {
			if gen {
				w.logits(srow, b, h, i, j0)
			}
			rowExpSum(prow[:lim], srow[:lim], sc, -lse)
		}
		if w.dropP > 0 {
			pzrow := pz[r*wq : (r+1)*wq]
			copy(pzrow, prow)
			w.dropRow(t.keep[:lim], pzrow[:lim], dprow[:lim], w.dropIndex(b, h, i, j0))
		}
		if w.dbias != nil {
			ds := t.dsb[:wq]
			softmaxBwdRowT(ds, prow, dprow, 1, w.d[bh*w.tq+i])
			w.addBias(ds, b, h, i, j0)
		}
		softmaxBwdRowT(dprow[:lim], prow[:lim], dprow[:lim], w.p.Scale, w.d[bh*w.tq+i]) // Scale·∂L/∂logits
	}
}

// addBias adds ds, the logits' gradient of query i and keys j0…, into the bias gradient.
func (w *attnBwd[T]) addBias(ds []T, b, h, i, j0 int) {
	off := b*w.bstr[0] + h*w.bstr[1] + i*w.bstr[2] + j0*w.bstr[3]
	if w.bstr[3] == 1 {
		for j, x := range w.dbias[off : off+len(ds)] {
			w.dbias[off+j] = x + ds[j]
		}
		return
	}
	for j, x := range ds {
		w.dbias[off+j*w.bstr[3]] += x
	}
}

// reduce sums the partial dQ of the key ranges and, for GQA, the dK and dV of the query
// heads sharing a key/value head, each in a fixed order.
func (w *attnBwd[T]) reduce() {
	if w.splits > 1 {
		parallelFor(len(w.dq), 1<<14, func(lo, hi int) {
			for _, p := range w.dqPart[1:] {
				for e, x := range p[lo:hi] {
					w.dq[lo+e] += x
				}
			}
		})
	}
	if w.per == 1 {
		return
	}
	n := w.tk * w.hs // one head's elements
	parallelFor(w.b*w.g, max(1, (1<<14)/max(1, n*w.per)), func(lo, hi int) {
		for bg := lo; bg < hi; bg++ {
			for _, pair := range [][2][]T{{w.dk, w.dkh}, {w.dv, w.dvh}} {
				dst, src := pair[0][bg*n:(bg+1)*n], pair[1][bg*w.per*n:]
				copy(dst, src[:n])
				for hh := 1; hh < w.per; hh++ {
					for e, x := range src[hh*n : (hh+1)*n] {
						dst[e] += x
					}
				}
			}
		}
	})
}
