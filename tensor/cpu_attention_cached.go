package tensor

// The CPU backend's AttentionCached: the forward kernel of cpu_attention.go reading keys
// and values [B, Tk, G, HS] in place. Only where a key tile is fetched differs (kvRows,
// by the strides attnGeom.kvStr): the rows of one key/value head are G·HS elements apart
// rather than HS. On the SIMD path the packing (or a one-query tile's in-place product)
// reads them with that stride; otherwise the tile is first gathered into a contiguous
// [wk, HS] buffer. Either way the tile products see the same
// operands, so results are Attention's bit for bit.

// AttentionCached implements CachedAttentionKernels.
func (cpuBackend) AttentionCached(a AttentionArgs, p AttentionParams) {
	if computeIs64(a.Q.DType) {
		newCachedAttnCall[float64](a, p).forward()
	} else {
		newCachedAttnCall[float32](a, p).forward()
	}
}

// newCachedAttnCall returns the attention call of a, whose keys and values are
// position-major [B, Tk, G, HS].
func newCachedAttnCall[T float](a AttentionArgs, p AttentionParams) *attnCall[T] {
	s := a.K.Shape // [B, Tk, G, HS]
	hm := Shape{s[0], s[2], s[1], s[3]}
	a.K.Shape, a.V.Shape = hm, hm // the geometry's [B, G, Tk, HS]
	c := newAttnCall[T](a, p)
	c.kvStr = [3]int{s[1] * s[2] * s[3], s[3], s[2] * s[3]}
	return c
}

// kvRows returns the keys and values of positions [j0, j0+wk) of key/value head kvh
// (b·G + g) as [wk, HS] matrices whose rows are ld elements apart.
func (c *attnCall[T]) kvRows(kvh, j0, wk int) (k, v []T, ld int) {
	b, g := kvh/c.g, kvh%c.g
	ld = c.kvStr[2]
	off := b*c.kvStr[0] + g*c.kvStr[1] + j0*ld
	end := off + (wk-1)*ld + c.hs
	return c.k[off:end], c.v[off:end], ld
}

// gatherKV copies the [wk, HS] matrices k and v, whose rows are ld apart, into t's
// buffer and returns the contiguous copies.
func (t *attnTiles[T]) gatherKV(k, v []T, wk, hs, ld int) (kc, vc []T) {
	if cap(t.kvg) < 2*wk*hs {
		t.kvg = make([]T, 2*attnKTile*hs)
	}
	kc, vc = t.kvg[:wk*hs], t.kvg[wk*hs:2*wk*hs]
	for r := range wk {
		copy(kc[r*hs:(r+1)*hs], k[r*ld:r*ld+hs])
		copy(vc[r*hs:(r+1)*hs], v[r*ld:r*ld+hs])
	}
	return kc, vc
}
