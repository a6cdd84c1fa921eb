package tensor

// Segments in the CPU backend's fused attention (AttentionOptions.Segments): each logit
// whose key is in another segment than its query is −∞ (attnCall.logits), and a pair of
// a query tile and a key tile that share no segment is skipped whole, in the forward and
// the backward, which for packed documents skips the tiles below the diagonal blocks.
// Skipping changes no bit: such a tile adds e^(−∞) = 0 to every sum. A tile whose
// queries and keys are all of one segment needs no mask and takes the path of an
// unmasked call (the scale folded into the exponential).

// attnSegs are a call's segment ids and, per sample and tile, the least and greatest id
// its queries or keys hold.
type attnSegs struct {
	ids      []int32 // [B, Tk]
	qlo, qhi []int32 // [B, query tiles]
	klo, khi []int32 // [B, key tiles]
	nqt, nkt int
}

// newAttnSegs returns the segments of g's call from s (I32 [B, Tk]), or nil when s is
// empty.
func newAttnSegs(g *attnGeom, s Span) *attnSegs {
	if s.Empty() {
		return nil
	}
	a := &attnSegs{ids: raw[int32](s), nqt: g.nqt, nkt: g.nkt}
	a.qlo, a.qhi = a.ranges(g, g.nqt, attnQTile, g.tk-g.tq, g.tq)
	a.klo, a.khi = a.ranges(g, g.nkt, attnKTile, 0, g.tk)
	return a
}

// ranges returns, for each sample and each of n tiles of size positions starting at
// key off, the least and greatest segment id over its positions (of end in all).
func (a *attnSegs) ranges(g *attnGeom, n, size, off, end int) (lo, hi []int32) {
	lo, hi = make([]int32, g.b*n), make([]int32, g.b*n)
	for b := range g.b {
		row := a.ids[b*g.tk+off : (b+1)*g.tk]
		for t := range n {
			ids := row[t*size : min(end, (t+1)*size)]
			l, h := ids[0], ids[0]
			for _, x := range ids[1:] {
				l, h = min(l, x), max(h, x)
			}
			lo[b*n+t], hi[b*n+t] = l, h
		}
	}
	return lo, hi
}

// hidden reports whether no query of tile qt shares a segment with a key of tile kt in
// sample b: their ranges of ids do not meet.
func (a *attnSegs) hidden(b, qt, kt int) bool {
	q, k := b*a.nqt+qt, b*a.nkt+kt
	return a.qhi[q] < a.klo[k] || a.khi[k] < a.qlo[q]
}

// uniform reports whether every query of tile qt and every key of tile kt in sample b
// are of one segment, so that no logit of the tile is masked by segments.
func (a *attnSegs) uniform(b, qt, kt int) bool {
	q, k := b*a.nqt+qt, b*a.nkt+kt
	return a.qlo[q] == a.qhi[q] && a.klo[k] == a.khi[k] && a.qlo[q] == a.klo[k]
}

// query returns the segment of query i of sample b.
func (a *attnSegs) query(g *attnGeom, b, i int) int32 { return a.ids[b*g.tk+i+g.tk-g.tq] }
