package data

// This file merges the symbols of one text (or word) as bpe_model.cc's SampleEncode does
// without dropout. mergeSimple rescans an array for the best pair; mergeHeap is
// SentencePiece's own priority queue over a linked list, O(n log n) for long texts. They
// are tested against each other.

// spSimpleMax is the number of symbols up to which segment uses mergeSimple.
const spSimpleMax = 32

// spSym is a symbol: s[start:end] is symbol id (a piece, or a character that is no piece:
// an id ≥ the number of pieces, or -1 if it is not even half of a piece). prev and next
// link the symbols still alive (mergeHeap); a merged-away symbol has start = end.
type spSym struct {
	id, start, end, prev, next int32
	frozen                     bool // a user-defined piece: never merged
}

// spPair is a candidate merge of the symbols left and right into a piece of size bytes.
type spPair struct {
	score             float32
	left, right, size int32
	id                int32
}

// spRev is how an unused piece was last formed: its left and right symbols, and the
// length of the left one.
type spRev struct{ left, right, leftLen int32 }

// spBPEScratch holds the buffers of one Encode.
type spBPEScratch struct {
	syms  []spSym
	pairs []spPair
	segs  []spSegment
	heap  *binHeap[spPair]
	rev   map[int32]spRev // unused piece → its last-formed halves
}

// segment returns the pieces of s (valid until the next call with sc).
func (b *spBPE) segment(sc *spBPEScratch, s string) []spSegment {
	syms := sc.syms[:0]
	user := b.t.norm.user
	for i := 0; i < len(s); {
		sym := spSym{start: int32(i)}
		if user != nil {
			if id, l := user.longest(s[i:]); l > 0 {
				sym.id, sym.frozen, i = id, true, i+l
			}
		}
		if !sym.frozen {
			l := min(spCharLen(s[i]), len(s)-i)
			sym.id, i = b.symbolOf(s[i:i+l]), i+l
		}
		sym.end = int32(i)
		syms = append(syms, sym)
	}
	sc.syms = syms
	if b.unused && sc.rev == nil {
		sc.rev = make(map[int32]spRev)
	}
	clear(sc.rev)
	if len(syms) <= b.simpleMax {
		syms = b.mergeSimple(sc, syms)
	} else {
		syms = b.mergeHeap(sc, syms)
	}
	segs := sc.segs[:0]
	for _, sym := range syms {
		segs = b.resegment(segs, sc.rev, sym.id, sym.start, sym.end)
	}
	sc.segs = segs
	return segs
}

// pair returns the merge of the adjacent symbols l and r (id -1: none), recording an
// unused result in rev as SentencePiece's MaybeAddNewSymbolPair does.
func (b *spBPE) pair(rev map[int32]spRev, l, r *spSym) spPair {
	if l.frozen || r.frozen || l.id < 0 || r.id < 0 {
		return spPair{id: -1}
	}
	m, ok := b.pairs[pairKey(l.id, r.id)]
	if !ok {
		return spPair{id: -1}
	}
	if rev != nil && b.t.types[m.id] == spUnused {
		rev[m.id] = spRev{l.id, r.id, l.end - l.start}
	}
	return spPair{score: m.score, size: r.end - l.start, id: m.id}
}

// mergeSimple merges syms in place: while some adjacent pair merges, the first pair of the
// highest score merges. It returns the merged prefix of syms.
func (b *spBPE) mergeSimple(sc *spBPEScratch, syms []spSym) []spSym {
	n := len(syms)
	pairs := sc.pairs[:0]
	for i := 0; i+1 < n; i++ {
		pairs = append(pairs, b.pair(sc.rev, &syms[i], &syms[i+1]))
	}
	sc.pairs = pairs
	for {
		best := -1
		for i := range n - 1 {
			if pairs[i].id >= 0 && (best < 0 || pairs[i].score > pairs[best].score) {
				best = i
			}
		}
		if best < 0 {
			return syms[:n]
		}
		syms[best].id, syms[best].end = pairs[best].id, syms[best+1].end
		copy(syms[best+1:n], syms[best+2:n])
		copy(pairs[best:n-1], pairs[best+1:n-1])
		n--
		if best > 0 {
			pairs[best-1] = b.pair(sc.rev, &syms[best-1], &syms[best])
		}
		if best+1 < n {
			pairs[best] = b.pair(sc.rev, &syms[best], &syms[best+1])
		}
	}
}

// spPairBefore orders the priority queue: higher score first, then the leftmost.
func spPairBefore(a, b spPair) bool {
	return a.score > b.score || (a.score == b.score && a.left < b.left)
}

// mergeHeap is SentencePiece's loop: a priority queue of candidate pairs, each popped pair
// merging unless one of its symbols changed since it was queued (SentencePiece's test:
// either is empty or their sizes no longer add up to the pair's). It returns the symbols
// still alive, compacted into the front of syms.
func (b *spBPE) mergeHeap(sc *spBPEScratch, syms []spSym) []spSym {
	for i := range syms {
		syms[i].prev, syms[i].next = int32(i-1), int32(i+1)
	}
	syms[len(syms)-1].next = -1
	if sc.heap == nil {
		sc.heap = &binHeap[spPair]{less: spPairBefore}
	}
	h := sc.heap
	h.items = h.items[:0]
	push := func(l, r int32) {
		if l < 0 || r < 0 {
			return
		}
		if p := b.pair(sc.rev, &syms[l], &syms[r]); p.id >= 0 {
			p.left, p.right = l, r
			h.push(p)
		}
	}
	for i := 1; i < len(syms); i++ {
		push(int32(i-1), int32(i))
	}
	for h.len() > 0 {
		p := h.pop()
		l, r := &syms[p.left], &syms[p.right]
		if l.start == l.end || r.start == r.end || (l.end-l.start)+(r.end-r.start) != p.size {
			continue
		}
		l.id, l.end, l.next = p.id, r.end, r.next
		if r.next >= 0 {
			syms[r.next].prev = p.left
		}
		r.end = r.start
		push(l.prev, p.left)
		push(p.left, l.next)
	}
	n := 0
	for i := int32(0); i >= 0; i = syms[i].next {
		syms[n] = syms[i]
		n++
	}
	return syms[:n]
}

// resegment appends the segments of symbol id at s[start:end]: an unused piece is split
// into the symbols it was last formed from, recursively; a symbol that is no piece is
// <unk> (SentencePiece's PieceToId).
func (b *spBPE) resegment(segs []spSegment, rev map[int32]spRev, id, start, end int32) []spSegment {
	for id >= 0 && int(id) < len(b.t.pieces) && b.t.types[id] == spUnused {
		r, ok := rev[id]
		if !ok {
			break
		}
		segs = b.resegment(segs, rev, r.left, start, start+r.leftLen)
		id, start = r.right, start+r.leftLen
	}
	if id < 0 || int(id) >= len(b.t.pieces) {
		id = b.t.unk
	}
	return append(segs, spSegment{start, end, id})
}
