package tensor

import (
	"math"
	"runtime"
)

// The CPU backend's fused attention (AttentionKernels), flash-attention style: the scores
// of a head are computed a tile at a time, attnQTile queries by attnKTile keys, and never
// stored whole.
//
// Forward, per tile of queries (in parallel over B × NH × query tiles):
//
//	for each key tile j (only those a causal query tile sees):
//	    S = Qᵢ·Kⱼᵀ; X = logits of S (scale, bias, masks)               [bq, w]
//	    m' = max(m, rowmax X); P = e^(X − m'); l = l·e^(m−m') + rowsum P
//	    O = O·e^(m−m') + dropout(P)·Vⱼ
//	out = O/l, lse = m + ln l
//
// Backward (FlashAttention-2), per head and range of key tiles, recomputing the scores:
//
//	D = rowsum(dO ∘ out) − dlse
//	for each key tile j, for each query tile i that sees it:
//	    P = e^(X − lse); dP = (dOᵢ·Vⱼᵀ) ∘ Z (Z the dropout mask and scale)
//	    dVⱼ += (P ∘ Z)ᵀ·dOᵢ;  dX = P ∘ (dP − D);  dBias += dX
//	    dKⱼ += scale·dXᵀ·Qᵢ;  dQᵢ += scale·dX·Kⱼ
//
// Tile products (cpu_attention_gemm.go) run the float32 SGEMM micro-kernels of gemm.go on
// one goroutine, from B operands packed once per key tile of a head (and, in the backward,
// per query tile), skipping what a causal mask hides; or matmulRef's loops in float64.
// Determinism: every sum has a fixed order — a tile product's chain of multiply-adds (the
// same whichever goroutine packed its operands), rows of a tile processed in order, key
// tiles in increasing order for dQ, query tiles in increasing order for dK and dV, ranges
// of key tiles (attnKeySplits) summed in order, the query heads of a key/value group (GQA)
// and of a broadcast bias summed in order. Goroutines only choose which whole item (a query
// tile; a head and key range) they compute, so results are bit for bit the same at any
// GOMAXPROCS.
//
// Memory: per goroutine a few tiles and a head's packed K and V (forward) or Q and dO
// (backward), O(T·HS); per call, in the backward, D (B·NH·Tq), partial dQ for key ranges
// when there are few heads, and per-query-head dK and dV for GQA (both O(B·NH·T·HS)). No
// [Tq, Tk] buffer exists except a bias gradient of that shape.

const (
	attnQTile = 64  // queries per tile (edge kernels of the 12-row SGEMM do the last 4)
	attnKTile = 128 // keys per tile
	// attnKeySplits is the most ranges the backward splits a head's key tiles into, each
	// with its own partial dQ summed afterwards, when fewer than attnMinItems heads (or
	// bias groups) would leave goroutines idle. It depends on shapes only.
	attnKeySplits = 4
	attnMinItems  = 16
)

func (cpuBackend) Attention(a AttentionArgs, p AttentionParams) {
	if computeIs64(a.Q.DType) {
		newAttnCall[float64](a, p).forward()
	} else {
		newAttnCall[float32](a, p).forward()
	}
}

func (cpuBackend) AttentionBackward(a AttentionArgs, g AttentionGrads, p AttentionParams) {
	if computeIs64(a.Q.DType) {
		newAttnCall[float64](a, p).backward(g)
	} else {
		newAttnCall[float32](a, p).backward(g)
	}
}

// attnGeom is the geometry of an attention call.
type attnGeom struct {
	b, nh, g, per  int // batch, query heads, key/value heads, query heads per key/value head
	tq, tk, hs     int
	nqt, nkt       int // query and key tiles
	causal         bool
	kvStr          [3]int // strides of K's and V's batch, key/value head and position ([B, G, Tk, HS]'s unless a cache's)
	ostr           [3]int // strides of Out's and DOut's batch, head and query ([B, NH, Tq, HS]'s, or [B, Tq, NH·HS]'s)
	mstr, bstr     [4]int // mask's and bias's strides in the scores [B, NH, Tq, Tk] (0: broadcast)
	dropBase       uint64 // full-tensor index of this call's element (0, 0, 0, 0)
	dropStr        [3]int // full-tensor strides of b, h and i (j's is 1)
	dropP, dropMul float64
}

// outAt returns the offset of query i's row of head (b, h) in Out and DOut.
func (g *attnGeom) outAt(b, h, i int) int { return b*g.ostr[0] + h*g.ostr[1] + i*g.ostr[2] }

// kvHeadOf returns the key/value head (b·G + g) of head bh = b·NH + h.
func (g *attnGeom) kvHeadOf(bh int) int { return bh/g.nh*g.g + bh%g.nh/g.per }

// visible returns how many keys (a prefix) query i may see.
func (g *attnGeom) visible(i int) int {
	if !g.causal {
		return g.tk
	}
	return min(g.tk, max(0, i+g.tk-g.tq+1))
}

// attnCall is one kernel call in compute type T: the geometry and the operands.
type attnCall[T float] struct {
	attnGeom
	p        AttentionParams
	a        AttentionArgs
	q, k, v  []T
	out, lse []T
	bias     []T
	mask32   []float32   // an F32 mask in place, or ...
	mask64   []float64   // ... any other mask converted
	segs     *attnSegs   // Segments, or nil
	kern     *gemmKernel // float32's SGEMM kernel, or nil
	fast     bool        // tile products on the SIMD path (cpu_attention_gemm.go)
}

func newAttnCall[T float](a AttentionArgs, p AttentionParams) *attnCall[T] {
	c := new(attnCall[T])
	c.init(a, p)
	return c
}

// init sets c up for the call a, p: newAttnCall's work, into memory the caller keeps
// (AttentionSlots recycles a decode step's calls).
func (c *attnCall[T]) init(a AttentionArgs, p AttentionParams) {
	g := newAttnGeom[T](a, p)
	*c = attnCall[T]{attnGeom: g, p: p, a: a, q: load[T](a.Q), k: load[T](a.K), v: load[T](a.V), bias: load[T](a.Bias),
		segs: newAttnSegs(&g, a.Segments)}
	switch {
	case a.Mask.Empty():
	case a.Mask.DType == F32:
		c.mask32 = raw[float32](a.Mask)
	default:
		c.mask64 = load[float64](a.Mask)
	}
	if _, f32 := any(c.q).([]float32); f32 {
		c.kern = defaultGemmKernel()
		c.fast = c.kern != nil && c.hs <= c.kern.kc && max(attnQTile, attnKTile) <= c.kern.kc
	}
}

// newAttnGeom returns the geometry of a call in compute type T.
func newAttnGeom[T float](a AttentionArgs, p AttentionParams) attnGeom {
	g := attnGeom{b: a.Q.Shape[0], nh: a.Q.Shape[1], g: a.K.Shape[1], tq: a.Q.Shape[2], tk: a.K.Shape[2],
		hs: a.Q.Shape[3], causal: p.Causal}
	g.per = g.nh / max(1, g.g)
	g.kvStr = [3]int{g.g * g.tk * g.hs, g.tk * g.hs, g.hs}
	g.ostr = [3]int{g.nh * g.tq * g.hs, g.tq * g.hs, g.hs}
	if len(a.Out.Shape) == 3 { // heads side by side (MergedAttentionKernels)
		g.ostr = [3]int{g.tq * g.nh * g.hs, g.hs, g.nh * g.hs}
	}
	g.nqt, g.nkt = (g.tq+attnQTile-1)/attnQTile, (g.tk+attnKTile-1)/attnKTile
	scores := Shape{g.b, g.nh, g.tq, g.tk}
	if !a.Mask.Empty() {
		copy(g.mstr[:], BroadcastStrides(a.Mask.Shape, scores))
	}
	if !a.Bias.Empty() {
		copy(g.bstr[:], BroadcastStrides(a.Bias.Shape, scores))
	}
	if p.Dropout > 0 {
		fs := p.Full.Strides()
		for d, s := range p.Start {
			g.dropBase += uint64(s * fs[d])
		}
		g.dropStr = [3]int{fs[0], fs[1], fs[2]}
		g.dropP, g.dropMul = p.Dropout, float64(T(1/(1-p.Dropout)))
	}
	return g
}

// general reports whether the logits of query tile qt and key tile kt of sample b need a
// pass of their own (attnCall.logits) rather than folding the scale into the
// exponential: always with a bias, a mask or a negative scale; with Segments, unless the
// tile's queries and keys are all of one segment.
func (c *attnCall[T]) general(b, qt, kt int) bool {
	if c.bias != nil || c.mask32 != nil || c.mask64 != nil || c.p.Scale < 0 {
		return true
	}
	return c.segs != nil && !c.segs.uniform(b, qt, kt)
}

// logits turns row (the scores of query i, keys j0…j0+len(row)−1 of head (b, h)) into
// Scale·s + bias with masked keys at −∞, as the reference rounds them.
func (c *attnCall[T]) logits(row []T, b, h, i, j0 int) {
	moff := b*c.mstr[0] + h*c.mstr[1] + i*c.mstr[2] + j0*c.mstr[3]
	boff := b*c.bstr[0] + h*c.bstr[1] + i*c.bstr[2] + j0*c.bstr[3]
	sc := c.p.Scale
	var segs []int32 // the keys' segments, with Segments
	var seg int32    // the query's
	if c.segs != nil {
		segs, seg = c.segs.ids[b*c.tk+j0:], c.segs.query(&c.attnGeom, b, i)
	}
	for j, s := range row {
		x := T(sc * float64(s))
		if c.bias != nil {
			x += c.bias[boff+j*c.bstr[3]]
		}
		if c.mask32 != nil && c.mask32[moff+j*c.mstr[3]] != 0 || c.mask64 != nil && c.mask64[moff+j*c.mstr[3]] != 0 ||
			segs != nil && segs[j] != seg {
			x = T(math.Inf(-1))
		}
		row[j] = x
	}
}

// expScale returns the scale the exponentials apply to a row after logits (1 when the
// general pass ran, else Scale).
func (c *attnCall[T]) expScale(general bool) float64 {
	if general {
		return 1
	}
	return c.p.Scale
}

// dropIndex returns the full-tensor index of probability (b, h, i, j).
func (c *attnCall[T]) dropIndex(b, h, i, j int) uint64 {
	return c.dropBase + uint64(b*c.dropStr[0]+h*c.dropStr[1]+i*c.dropStr[2]+j)
}

// attnTiles is one goroutine's scratch.
type attnTiles[T float] struct {
	s, dp, pz, dsb    []T // [attnQTile, attnKTile] tiles: scores, then probabilities, ...
	o                 []T // [attnQTile, HS] output accumulator
	m, l              []float64
	keep              []bool
	arow              []T       // matmulRefRow's packed row
	kvg               []T       // the forward's key and value tile gathered from a position-major cache (gatherKV)
	rowTail           []float32 // a one-query tile's last keys and their scores (rowScores)
	doRows            []T       // the backward's rows of a query tile of dOut gathered off the SIMD path (doutRows)
	g                 attnGemm
	kT, vT, k         []float32 // the backward's packed key tile: Kᵀ, Vᵀ and K (attnKeyTile)
	qdo               []float32 // the backward's packed Q and dO of a head's query tiles (queryTile)
	qdoPacked, dqDone []bool    // per query tile of the head: Q and dO packed; dQ rows written
	kv                []float32 // the forward's packed Kᵀ and V of key/value head kvHead (keyTile)
	kvHead            int
	kvCall            int         // with AttentionCachedBatch, the call whose head kvHead is
	nextK             []float32   // the first keys of the head this goroutine attends next (attnBatch), or nil
	kvPacked          []bool      // per key tile: packed
	gw                *gemmWorker // whose buffers the float32 ones are (newTiles)
}

// newTiles returns a goroutine's scratch for the forward or the backward. Its float32
// buffers come from one of gemm.go's recycled gemmWorkers (handed back by release), so
// that calls reuse memory already in cache rather than touching fresh pages.
func (c *attnCall[T]) newTiles(backward bool) *attnTiles[T] {
	const n = attnQTile * attnKTile
	hs := c.hs
	gw := gemmWorkers.Get().(*gemmWorker)
	t := &attnTiles[T]{gw: gw, g: attnGemm{kern: c.kern, apack: gw.apack, tmp: gw.tmp}}
	if c.dropP > 0 {
		t.keep = make([]bool, n)
	}
	if !c.fast {
		t.arow = make([]T, max(attnQTile, attnKTile, hs))
	}
	kslot, qslot := 0, 0 // packed key and query tiles
	if c.fast {
		kslot, qslot = c.packedSize(attnKTile), c.packedSize(attnQTile)
	}
	if backward {
		f := t.floats(4 * n)
		t.s, t.dp, t.pz, t.dsb = f[:n], f[n:2*n], f[2*n:3*n], f[3*n:]
		p := t.packs(3*kslot + 2*c.nqt*qslot)
		t.kT, t.vT, t.k, t.qdo = p[:kslot], p[kslot:2*kslot], p[2*kslot:3*kslot], p[3*kslot:]
		t.qdoPacked, t.dqDone = make([]bool, c.nqt), make([]bool, c.nqt)
	} else {
		f := t.floats(n + attnQTile*hs)
		t.s, t.o, t.m, t.l = f[:n], f[n:], make([]float64, attnQTile), make([]float64, attnQTile)
		t.kv, t.kvHead, t.kvPacked = t.packs(2*c.nkt*kslot), -1, make([]bool, c.nkt)
	}
	return t
}

// floats returns n elements of T, in float32 the recycled worker's.
func (t *attnTiles[T]) floats(n int) []T {
	if _, f32 := any(t.s).([]float32); !f32 {
		return make([]T, n)
	}
	t.gw.cpad = grow(t.gw.cpad, n)
	return any(t.gw.cpad).([]T)
}

// packs returns n elements for packed operands, the recycled worker's.
func (t *attnTiles[T]) packs(n int) []float32 {
	t.gw.bpack = grow(t.gw.bpack, n)
	return t.gw.bpack
}

// release hands the recycled buffers back; t must not be used after.
func (t *attnTiles[T]) release() {
	t.gw.apack, t.gw.tmp = t.g.apack, t.g.tmp
	gemmWorkers.Put(t.gw)
}

// packedSize returns the elements that a tile of rows rows of Q, K, V or dO ([rows, HS])
// takes packed as a B operand, either way round.
func (c *attnCall[T]) packedSize(rows int) int {
	nr := c.kern.nr
	return roundUp(rows, nr) * roundUp(c.hs, nr)
}

// attnParallel runs body(t, i) for each i in [0, n) on up to GOMAXPROCS goroutines that
// take chunk items at a time, each with its own scratch t from tiles (taken when it takes
// its first chunk, released at the end).
func attnParallel[T float](n, chunk int, tiles func() *attnTiles[T], body func(t *attnTiles[T], i int)) {
	chunks := (n + chunk - 1) / chunk
	if min(runtime.GOMAXPROCS(0), chunks) <= 1 {
		t := tiles()
		for i := range n {
			body(t, i)
		}
		t.release()
		return
	}
	pullItems(chunks, chunks, func(int) (func(int), func()) {
		var t *attnTiles[T]
		item := func(ci int) {
			if t == nil {
				t = tiles()
			}
			for i := ci * chunk; i < min(n, (ci+1)*chunk); i++ {
				body(t, i)
			}
		}
		done := func() {
			if t != nil {
				t.release()
			}
		}
		return item, done
	})
}

// attnHeadsPerWorker is how many heads per goroutine let the forward hand out whole heads
// (each goroutine packing a head's keys and values once) rather than query tiles.
const attnHeadsPerWorker = 4

// forward runs the forward kernel: items are query tiles, head by head, the last tiles
// (the most keys under a causal mask) of a head first; goroutines take whole heads when
// there are enough.
func (c *attnCall[T]) forward() {
	heads := c.b * c.nh
	c.out, c.lse = output[T](c.a.Out), output[T](c.a.LSE)
	chunk := 1
	if heads >= attnHeadsPerWorker*runtime.GOMAXPROCS(0) {
		chunk = c.nqt
	}
	attnParallel(heads*c.nqt, chunk, func() *attnTiles[T] { return c.newTiles(false) }, func(t *attnTiles[T], it int) {
		c.forwardTile(t, it/c.nqt, c.nqt-1-it%c.nqt)
	})
	store(c.a.Out, c.out)
	store(c.a.LSE, c.lse)
}

// forwardTile computes the output rows and lse of query tile qt of head bh = b·NH + h.
func (c *attnCall[T]) forwardTile(t *attnTiles[T], bh, qt int) {
	b, h := bh/c.nh, bh%c.nh
	kvh := c.kvHeadOf(bh)
	i0 := qt * attnQTile
	bq, hs := min(attnQTile, c.tq-i0), c.hs
	q := c.q[(bh*c.tq+i0)*hs : (bh*c.tq+i0+bq)*hs] // [bq, HS]
	o, m, l := t.o[:bq*hs], t.m[:bq], t.l[:bq]
	clear(o)
	for r := range m {
		m[r], l[r] = math.Inf(-1), 0
	}
	kEnd := c.visible(i0 + bq - 1)
	inPlace := c.rowInPlace(bq) // cpu_attention_decode.go
	whole := inPlace && c.segs == nil && kEnd <= len(t.s)
	if whole { // every key tile's scores in one pass over the keys
		c.rowScores(t, t.s[:kEnd], q, kvh, 0, kEnd)
		if len(t.nextK) > 0 { // fetched while this head's values are summed
			attnPrefetch(&t.nextK[0], len(t.nextK)/16)
		}
	}
	for j0 := 0; j0 < kEnd; j0 += attnKTile {
		if c.segs != nil && c.segs.hidden(b, qt, j0/attnKTile) {
			continue
		}
		gen := c.general(b, qt, j0/attnKTile)
		sc := c.expScale(gen)
		w := min(attnKTile, kEnd-j0)
		s := t.s[:bq*w] // [bq, w]: the scores, then the probabilities over them
		var v attnB[T]
		d := i0 + c.tk - c.tq + 1 - j0 // attnSpan's offset for queries by keys
		switch {
		case whole:
			s = t.s[j0 : j0+w]
		case inPlace:
			c.rowScores(t, s, q, kvh, j0, w)
		default:
			var kT attnB[T]
			kT, v = c.keyTile(t, kvh, j0)
			c.product(t, s, q, false, kT, bq, w, hs, false, c.span(attnCols, d))
		}
		for r := 0; r < bq; r++ {
			lim := min(w, max(0, c.visible(i0+r)-j0))
			srow, prow := s[r*w:r*w+lim], s[r*w:(r+1)*w]
			clear(prow[lim:])
			if gen {
				c.logits(srow, b, h, i0+r, j0)
			}
			mNew := m[r]
			if lim > 0 {
				mNew = max(mNew, sc*rowMax(srow))
			}
			if math.IsInf(mNew, -1) { // every key so far masked
				clear(prow)
				continue
			}
			alpha := math.Exp(m[r] - mNew)
			l[r] = l[r]*alpha + rowExpSum(prow[:lim], srow, sc, -mNew)
			m[r] = mNew
			if alpha != 1 {
				scaleRow(o[r*hs:(r+1)*hs], alpha)
			}
			if c.dropP > 0 {
				c.dropRow(t.keep[:lim], prow[:lim], nil, c.dropIndex(b, h, i0+r, j0))
			}
		}
		if inPlace {
			c.rowValues(o, s, kvh, j0, w)
		} else {
			c.product(t, o, s, false, v, bq, hs, w, true, c.span(attnKPrefix, d))
		}
	}
	o0, ld, lse := c.outAt(b, h, i0), c.ostr[2], c.lse[bh*c.tq+i0:]
	for r := 0; r < bq; r++ {
		out := c.out[o0+r*ld : o0+r*ld+hs]
		if l[r] == 0 { // every key masked
			clear(out)
			lse[r] = T(math.Inf(-1))
			continue
		}
		inv := 1 / l[r]
		for j, x := range o[r*hs : (r+1)*hs] {
			out[j] = T(float64(x) * inv)
		}
		lse[r] = T(m[r] + math.Log(l[r]))
	}
}

// keyTile returns the key tile at j0 of key/value head kvh as the forward's B operands:
// Kᵀ [HS, wk] and V [wk, HS]. On the SIMD path a goroutine packs them once for the
// query tiles (of the query heads sharing kvh) it computes one after another.
func (c *attnCall[T]) keyTile(t *attnTiles[T], kvh, j0 int) (kT, v attnB[T]) {
	hs, wk, kt := c.hs, min(attnKTile, c.tk-j0), j0/attnKTile
	k, vv, ld := c.kvRows(kvh, j0, wk) // [wk, HS], rows ld apart
	if !c.fast {
		if ld != hs {
			k, vv = t.gatherKV(k, vv, wk, hs, ld)
		}
		return c.operand(nil, k, true, hs, wk), c.operand(nil, vv, false, wk, hs)
	}
	if t.kvHead != kvh {
		t.kvHead = kvh
		clear(t.kvPacked)
	}
	slot := c.packedSize(attnKTile)
	kdst, vdst := t.kv[2*kt*slot:(2*kt+1)*slot], t.kv[(2*kt+1)*slot:(2*kt+2)*slot]
	if t.kvPacked[kt] {
		return c.packed(kdst, hs, wk), c.packed(vdst, wk, hs)
	}
	t.kvPacked[kt] = true
	return c.operandLD(kdst, k, true, hs, wk, ld), c.operandLD(vdst, vv, false, wk, hs, ld)
}

// dropRow applies dropout to a row of probabilities p (and to dp, when not nil) whose
// first element has full-tensor index idx0: each element kept (keep[j], the mask of
// DistDropout) is scaled by 1/(1−Dropout), the others zeroed.
func (c *attnCall[T]) dropRow(keep []bool, p, dp []T, idx0 uint64) {
	attnKeep(keep, idx0, c.p.Key, c.dropP)
	mul := T(c.dropMul)
	for j, k := range keep {
		if !k {
			p[j] = 0
			if dp != nil {
				dp[j] = 0
			}
			continue
		}
		p[j] *= mul
		if dp != nil {
			dp[j] *= mul
		}
	}
}

// attnKeep sets keep[j] to whether element idx0+j of a tensor survives dropout with
// probability p under key: the element's uniform fraction (RNG) is at least p, as
// RandomParams.Sample's DistDropout decides.
func attnKeep(keep []bool, idx0 uint64, key [2]uint32, p float64) {
	j := 0
	if idx0%2 == 1 && len(keep) > 0 {
		keep[0] = uniformAt(idx0, key) >= p
		j = 1
	}
	for ; j+1 < len(keep); j += 2 {
		blk := philoxBlock((idx0+uint64(j))/2, key)
		keep[j] = fraction53(blk[0], blk[1]) >= p
		keep[j+1] = fraction53(blk[2], blk[3]) >= p
	}
	if j < len(keep) {
		keep[j] = uniformAt(idx0+uint64(j), key) >= p
	}
}
