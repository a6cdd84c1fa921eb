package data

import "unicode/utf8"

// This file is SentencePiece's BPE model (bpe_model.cc), the segmentation of a SentencePiece
// whose trainer_spec.model_type is BPE (Llama 2, Mistral, Gemma ...).

// spBPE is SentencePiece's BPE segmentation. The normalized text is split into symbols —
// user-defined pieces (longest match, frozen: they never merge) and single characters —
// and then, while some adjacent pair of symbols concatenates to a normal, user-defined or
// unused piece, the pair whose piece scores highest is merged, the leftmost one on equal
// scores (SentencePiece's priority queue orders by score, then by left position). A
// remaining symbol that is no piece is <unk>; a merged unused piece is split back into the
// two symbols it was last queued from (in any position of the text), recursively, as
// SentencePiece's resegmentation does.
//
// The merges are a table keyed by the symbol ids of the two halves (every split of every
// piece), so encoding compares ids, not strings; characters that are no piece but half of
// one get ids after the pieces. When no piece can span the place before a "▁" that
// follows a non-"▁" (the check is on the vocabulary, see bpeSplitMarker), the text is
// merged word by word with the same result, and words are cached.
type spBPE struct {
	t      *SentencePiece
	pairs  map[uint64]spMerge   // (left symbol, right symbol) → merged piece
	ascii  [utf8.RuneSelf]int32 // symbols of ASCII characters; -1: none
	chars  map[string]int32     // symbols of non-ASCII characters
	unused bool                 // the model has unused pieces: resegmentation needs rev
	split  string               // the marker words start with; "" when words cannot be merged apart
	// simpleMax is the number of symbols up to which segment uses mergeSimple
	// (spSimpleMax; tests change it).
	simpleMax int
	cache     wordCache
}

// spMerge is the piece two adjacent symbols merge into, and its score.
type spMerge struct {
	id    int32
	score float32
}

// spMergeable reports whether pieces of type typ take part in BPE merges (SentencePiece's
// pieces_ map).
func spMergeable(typ uint8) bool {
	return typ == spNormal || typ == spUserDefined || typ == spUnused
}

// newSPBPE builds the merge table of t's pieces.
func newSPBPE(t *SentencePiece) *spBPE {
	b := &spBPE{t: t, pairs: make(map[uint64]spMerge), chars: make(map[string]int32), simpleMax: spSimpleMax}
	for i := range b.ascii {
		b.ascii[i] = -1
		if id, ok := t.pieceID[string(rune(i))]; ok {
			b.ascii[i] = id
		}
	}
	next := int32(len(t.pieces)) // ids of characters that are no piece
	symbol := func(x string) int32 {
		if len(x) == spCharLen(x[0]) { // one character, as the input is split
			if len(x) == 1 && x[0] < utf8.RuneSelf {
				if b.ascii[x[0]] < 0 {
					b.ascii[x[0]] = next
					next++
				}
				return b.ascii[x[0]]
			}
			id, ok := t.pieceID[x]
			if !ok {
				if id, ok = b.chars[x]; !ok {
					id = next
					next++
				}
			}
			b.chars[x] = id
			return id
		}
		if id, ok := t.pieceID[x]; ok && spMergeable(t.types[id]) {
			return id
		}
		return -1 // no symbol is ever x
	}
	for id, p := range t.pieces {
		if !spMergeable(t.types[id]) {
			continue
		}
		b.unused = b.unused || t.types[id] == spUnused
		for k := 1; k < len(p); k++ {
			l, r := symbol(p[:k]), symbol(p[k:])
			if l >= 0 && r >= 0 {
				b.pairs[pairKey(l, r)] = spMerge{int32(id), t.scores[id]}
			}
		}
	}
	b.split = bpeSplitMarker(t, b.unused)
	return b
}

// bpeSplitMarker returns the whitespace marker before which the normalized text can be cut
// into words that merge independently: "▁" (or " " without escaping), when the dummy
// prefix is a prefix, no piece is unused (resegmentation remembers merges across the
// whole text) or invalid UTF-8, and no piece holds the marker after something that is not
// the marker — then no piece can span a cut before a marker that follows a non-marker.
// Otherwise "": the text is merged whole.
func bpeSplitMarker(t *SentencePiece, unused bool) string {
	if t.norm.suffix || unused {
		return ""
	}
	marker := " "
	if t.norm.escapeWS {
		marker = spaceMarker
	}
	for id, p := range t.pieces {
		if !spMergeable(t.types[id]) {
			continue
		}
		if !utf8.ValidString(p) {
			return ""
		}
		if spansMetaspaceCut(p, marker) {
			return ""
		}
	}
	return marker
}

// symbolOf returns the symbol id of the character c (one character as the input is
// split); -1 if it is neither a piece nor half of one.
func (b *spBPE) symbolOf(c string) int32 {
	if len(c) == 1 && c[0] < utf8.RuneSelf {
		return b.ascii[c[0]]
	}
	if id, ok := b.chars[c]; ok {
		return id
	}
	if id, ok := b.t.pieceID[c]; ok {
		return id
	}
	return -1
}

// appendIDs appends the ids of the normalized text s: word by word through the cache
// when the vocabulary allows (see bpeSplitMarker) and s is valid UTF-8, else whole.
func (b *spBPE) appendIDs(dst []int32, s string) []int32 {
	var sc spBPEScratch
	prevUnk := false
	if b.split == "" || !utf8.ValidString(s) {
		return b.t.appendSegments(dst, s, b.segment(&sc, s), &prevUnk)
	}
	for len(s) > 0 {
		n := metaspaceCut(s, b.split)
		w := s[:n]
		s = s[n:]
		if ids, ok := b.cache.get(w); ok {
			dst, prevUnk = append(dst, ids...), false
			continue
		}
		segs := b.segment(&sc, w)
		start := len(dst)
		dst = b.t.appendSegments(dst, w, segs, &prevUnk)
		if b.cacheable(segs) {
			b.cache.put(w, append([]int32(nil), dst[start:]...))
		}
	}
	return dst
}

// cacheable reports whether a word's ids do not depend on the words around it: always
// with byte fallback; without, if it neither starts nor ends with <unk> (a run of <unk>s
// across words is one).
func (b *spBPE) cacheable(segs []spSegment) bool {
	return b.t.byteFallback || len(segs) == 0 || (segs[0].id != b.t.unk && segs[len(segs)-1].id != b.t.unk)
}
