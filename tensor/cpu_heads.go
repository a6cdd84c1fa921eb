package tensor

// The CPU backend's HeadKernels (fused_heads.go): a fused projection's rows cut into heads,
// the bias added on the way, in one pass over memory, and back.

// headLayout locates the heads of SplitHeads's operands: q [B, G·per, T, HS], k and v
// [B, G, T, HS], a projection row [G·(per+2)·HS] per (b, t).
type headLayout struct {
	b, t, g, per, hs int
}

func newHeadLayout(q, k Span, per int) headLayout {
	return headLayout{b: q.Shape[0], t: q.Shape[2], g: k.Shape[1], per: per, hs: q.Shape[3]}
}

// head returns where slot j (a query head j < per, the key per, the value per+1) of group
// gi of position (bi, ti) lies: in q, k or v (0, 1, 2) at offset off.
func (l *headLayout) head(bi, ti, gi, j int) (which, off int) {
	switch {
	case j < l.per:
		return 0, ((bi*l.g*l.per+gi*l.per+j)*l.t + ti) * l.hs
	case j == l.per:
		return 1, ((bi*l.g+gi)*l.t + ti) * l.hs
	}
	return 2, ((bi*l.g+gi)*l.t + ti) * l.hs
}

// rows runs body(r, row, heads) for each projection row r in [0, B·T) on up to
// GOMAXPROCS goroutines: row is r's offset in the projection, heads[s] the offsets of
// its slots s = gi·(per+2)+j in q, k or v (which[s]).
func (l *headLayout) rows(body func(row int, which, heads []int)) {
	slots := l.g * (l.per + 2)
	parallelFor(l.b*l.t, max(1, copyGrain/(4*slots*l.hs)), func(lo, hi int) {
		which, heads := make([]int, slots), make([]int, slots)
		for r := lo; r < hi; r++ {
			for s := range slots {
				which[s], heads[s] = l.head(r/l.t, r%l.t, s/(l.per+2), s%(l.per+2))
			}
			body(r*slots*l.hs, which, heads)
		}
	})
}

func (cpuBackend) SplitHeads(q, k, v, qkv, bias Span, per int) {
	l := newHeadLayout(q, k, per)
	dst := [3][]float32{raw[float32](q), raw[float32](k), raw[float32](v)}
	src, hs := raw[float32](qkv), l.hs
	var b []float32
	if !bias.Empty() {
		b = raw[float32](bias)
	}
	l.rows(func(row int, which, heads []int) {
		for s, w := range which {
			d, x := dst[w][heads[s]:heads[s]+hs], src[row+s*hs:row+(s+1)*hs]
			if b == nil {
				copy(d, x)
				continue
			}
			binaryRow(OpAdd, d, x, b[s*hs:(s+1)*hs], 1, 1)
		}
	})
}

func (cpuBackend) SplitHeadsBackward(dqkv, dq, dk, dv Span, per int) {
	l := newHeadLayout(dq, dk, per)
	src := [3][]float32{raw[float32](dq), raw[float32](dk), raw[float32](dv)}
	dst := raw[float32](dqkv)
	hs := l.hs
	l.rows(func(row int, which, heads []int) {
		for s, w := range which {
			copy(dst[row+s*hs:row+(s+1)*hs], src[w][heads[s]:heads[s]+hs])
		}
	})
}
