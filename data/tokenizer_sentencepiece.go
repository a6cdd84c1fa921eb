package data

import (
	"fmt"
	"os"
	"strings"
	"unicode/utf8"
)

func init() {
	tokenizerTypes["SentencePieceTokenizer"] = func(c TokenizerConfig) (Tokenizer, error) {
		model := c.VocabFile
		if model == "" {
			model = c.TokenizerModel
		}
		return LoadSentencePiece(model, c.VocabExtraIDs)
	}
}

// SentencePiece is a SentencePiece tokenizer read from a .model file (T5's spiece.model,
// Llama 2's tokenizer.model; Megatron's SentencePieceTokenizer). Encoding is
// SentencePiece's: the model's normalizer (its precompiled charsmap, e.g. nmt_nfkc; extra
// whitespace removed; a "▁" dummy prefix; spaces as "▁"), then the model type's
// segmentation — unigram: the Viterbi segmentation that maximizes the sum of piece scores
// (user-defined pieces always win; a character no piece covers is <unk> with score
// min − 10); BPE: characters merged pairwise, the adjacent pair whose merged piece scores
// highest first (see spBPE) — and then a character no piece covers is <unk>, consecutive
// <unk>s becoming one, or with byte fallback its UTF-8 byte pieces <0xXX>. Text is encoded
// literally: "<s>" or "<extra_id_0>" in it are not special. Decoding is SentencePiece's
// DecodeIds. Word and character models are refused.
//
// Special ids: BOS, EOS and Pad are the model's <s>, </s> and <pad> (by trainer_spec's
// piece names, when they are control pieces); EOD is EOS; CLS, SEP and Mask are -1. T5
// sentinels: if the model has pieces <extra_id_0>, <extra_id_1>, ..., those; otherwise
// extraIDs ids after the pieces in Hugging Face T5's layout, <extra_id_i> = (number of
// pieces) + extraIDs − 1 − i, so <extra_id_0> is the last id (T5: 32099 of 32100).
// (Megatron's legacy SentencePieceTokenizer differs: it appends <CLS>, <SEP>, <EOD>,
// <MASK>, missing <pad>/<s>/</s>, then <extra_id_0> first.)
//
// A SentencePiece is immutable and safe for concurrent use.
type SentencePiece struct {
	pieces       []string
	scores       []float32
	types        []uint8
	pieceID      map[string]int32
	trie         *byteTrie // normal, user-defined and unused pieces
	unk          int32
	byteID       [256]int32 // <0xXX> pieces; unk where absent
	byteOf       []int16    // [pieces] the byte of a <0xXX> piece; -1 for other pieces
	minScore     float32    // over normal pieces
	maxScore     float32
	byteFallback bool
	unkSurface   string
	norm         spNormalizer
	extra        int // sentinels appended after the pieces
	special      SpecialIDs
	model        spModel // the model type's segmentation
}

// spModel is the segmentation step of a SentencePiece model type.
type spModel interface {
	// appendIDs appends the ids of the normalized text s to dst.
	appendIDs(dst []int32, s string) []int32
}

// spUnigram is the unigram model: SentencePiece.viterbi.
type spUnigram struct{ t *SentencePiece }

func (u spUnigram) appendIDs(dst []int32, s string) []int32 {
	prevUnk := false
	return u.t.appendSegments(dst, s, u.t.viterbi(s), &prevUnk)
}

// LoadSentencePiece reads a SentencePiece .model file; extraIDs is Megatron's
// --vocab-extra-ids (used only when the model has no <extra_id_N> pieces). Errors name
// the file.
func LoadSentencePiece(modelFile string, extraIDs int) (*SentencePiece, error) {
	b, err := os.ReadFile(modelFile)
	if err != nil {
		return nil, fmt.Errorf("data: SentencePiece model: %w", err)
	}
	t, err := NewSentencePiece(b, extraIDs)
	if err != nil {
		return nil, fmt.Errorf("data: SentencePiece model %s: %w", modelFile, err)
	}
	return t, nil
}

// NewSentencePiece is LoadSentencePiece from the bytes of a .model file.
func NewSentencePiece(model []byte, extraIDs int) (*SentencePiece, error) {
	m, err := parseSPModel(model)
	if err != nil {
		return nil, err
	}
	if m.modelType != spModelUnigram && m.modelType != spModelBPE {
		return nil, fmt.Errorf("model type %d is neither unigram (1) nor BPE (2); word and character models are not supported", m.modelType)
	}
	if m.hasDenormalizer {
		return nil, fmt.Errorf("models with a denormalizer are not supported")
	}
	if extraIDs < 0 {
		return nil, fmt.Errorf("negative number of extra ids %d", extraIDs)
	}
	t := &SentencePiece{
		pieces: m.pieces, scores: m.scores, types: m.types, pieceID: make(map[string]int32, len(m.pieces)),
		trie: newByteTrie(), unk: -1, byteFallback: m.byteFallback, unkSurface: m.unkSurface,
		norm: spNormalizer{addDummyPrefix: m.addDummyPrefix, removeExtraWS: m.removeExtraWS,
			escapeWS: m.escapeWS, suffix: m.treatWhitespaceAsSuffix},
	}
	if len(m.charsMap) > 0 {
		if t.norm.trie, t.norm.replacement, err = decodeCharsMap(m.charsMap); err != nil {
			return nil, fmt.Errorf("normalizer %q: %w", m.normalizerName, err)
		}
	}
	if err := t.indexPieces(); err != nil {
		return nil, err
	}
	t.norm.findPlain()
	t.setSpecial(m, extraIDs)
	t.model = spUnigram{t}
	if m.modelType == spModelBPE {
		t.model = newSPBPE(t)
	}
	return t, nil
}

// indexPieces builds the lookup tables, as ModelInterface::InitializePieces and the
// unigram model's constructor do.
func (t *SentencePiece) indexPieces() error {
	first := true
	for i, p := range t.pieces {
		id, typ := int32(i), t.types[i]
		if p == "" {
			return fmt.Errorf("piece %d is empty", i)
		}
		if _, dup := t.pieceID[p]; dup {
			return fmt.Errorf("piece %q is defined twice", p)
		}
		t.pieceID[p] = id
		switch typ {
		case spNormal, spUserDefined, spUnused:
			t.trie.insert(p, id)
		case spUnknown:
			if t.unk >= 0 {
				return fmt.Errorf("two unknown pieces, %d and %d", t.unk, id)
			}
			t.unk = id
		}
		if typ == spUserDefined {
			if t.norm.user == nil {
				t.norm.user = newByteTrie()
			}
			t.norm.user.insert(p, id)
		}
		if typ == spNormal {
			if first || t.scores[i] < t.minScore {
				t.minScore = t.scores[i]
			}
			if first || t.scores[i] > t.maxScore {
				t.maxScore = t.scores[i]
			}
			first = false
		}
	}
	if t.unk < 0 {
		return fmt.Errorf("no unknown piece")
	}
	t.byteOf = make([]int16, len(t.pieces))
	for i := range t.byteOf {
		t.byteOf[i] = -1
	}
	for b := range 256 {
		t.byteID[b] = t.unk
		if id, ok := t.pieceID[fmt.Sprintf("<0x%02X>", b)]; ok && t.types[id] == spByte {
			t.byteID[b], t.byteOf[id] = id, int16(b)
		}
	}
	return t.checkBytePieces()
}

// checkBytePieces refuses the byte pieces SentencePiece refuses: a byte piece that is not
// <0xXX>, byte pieces without byte_fallback, and byte_fallback without all 256.
func (t *SentencePiece) checkBytePieces() error {
	n := 0
	for i, typ := range t.types {
		if typ != spByte {
			continue
		}
		if t.byteOf[i] < 0 {
			return fmt.Errorf("byte piece %d %q is not <0xXX>", i, t.pieces[i])
		}
		if !t.byteFallback {
			return fmt.Errorf("byte piece %q although trainer_spec.byte_fallback is false", t.pieces[i])
		}
		n++
	}
	if t.byteFallback && n != 256 {
		return fmt.Errorf("trainer_spec.byte_fallback is true but the model has %d byte pieces <0xXX>, not 256", n)
	}
	return nil
}

// setSpecial finds the special ids (SentencePieceProcessor's bos_id etc.) and sentinels.
func (t *SentencePiece) setSpecial(m *spModelProto, extraIDs int) {
	control := func(piece string) int32 {
		if id, ok := t.pieceID[piece]; ok && t.types[id] == spControl {
			return id
		}
		return -1
	}
	s := NoSpecial()
	s.BOS, s.EOS, s.Pad = control(m.bosPiece), control(m.eosPiece), control(m.padPiece)
	s.EOD = s.EOS
	for i := 0; ; i++ {
		id, ok := t.pieceID[fmt.Sprintf("<extra_id_%d>", i)]
		if !ok {
			break
		}
		s.Sentinels = append(s.Sentinels, id)
	}
	if len(s.Sentinels) == 0 {
		t.extra = extraIDs
		for i := range extraIDs {
			s.Sentinels = append(s.Sentinels, int32(len(t.pieces)+extraIDs-1-i))
		}
	}
	t.special = s
}

// VocabSize returns the number of pieces plus the appended sentinels.
func (t *SentencePiece) VocabSize() int { return len(t.pieces) + t.extra }

// Special returns the special ids (see SentencePiece).
func (t *SentencePiece) Special() SpecialIDs {
	s := t.special
	s.Sentinels = append([]int32(nil), t.special.Sentinels...)
	return s
}

// Encode returns the ids of text (no BOS or EOS added, as Megatron's tokenize).
func (t *SentencePiece) Encode(text string) []int32 {
	return t.model.appendIDs(nil, t.norm.normalize(text))
}

// appendSegments appends the ids of the segments of s, as SentencePieceProcessor::Encode
// turns a model's pieces into ids: an unknown segment becomes its bytes' <0xXX> ids with
// byte fallback; without, a run of unknown segments is one <unk>. *prevUnk says whether
// the last segment before these was unknown, and is updated.
func (t *SentencePiece) appendSegments(ids []int32, s string, segs []spSegment, prevUnk *bool) []int32 {
	for _, sg := range segs {
		isUnk := sg.id == t.unk
		switch {
		case isUnk && t.byteFallback:
			for i := sg.start; i < sg.end; i++ {
				ids = append(ids, t.byteID[s[i]])
			}
		case isUnk && *prevUnk: // a run of unknown characters is one <unk>
		default:
			ids = append(ids, sg.id)
		}
		*prevUnk = isUnk
	}
	return ids
}

// spSegment is a piece of the best segmentation: s[start:end] is piece id.
type spSegment struct{ start, end, id int32 }

// spUnkPenalty is how far below the lowest piece score an unknown character scores.
const spUnkPenalty float32 = 10

// viterbi is the unigram model's EncodeOptimized: for each end position, the
// best-scoring segmentation of the prefix up to it, found left to right; scores are
// float32 as in SentencePiece, ties keep the earlier-found path.
func (t *SentencePiece) viterbi(s string) []spSegment {
	type node struct {
		score float32
		start int32
		id    int32
	}
	best := make([]node, len(s)+1)
	for i := range best {
		best[i].start = -1
	}
	unkScore := t.minScore - spUnkPenalty
	for start := 0; start < len(s); {
		mblen := min(spCharLen(s[start]), len(s)-start)
		base := best[start].score
		hasSingle := false
		at := int32(0) // trie node
		for k := start; k < len(s); k++ {
			child, ok := t.trie.next[uint64(at)<<8|uint64(s[k])]
			if !ok {
				break
			}
			at = child
			id := t.trie.val[at]
			if id < 0 || t.types[id] == spUnused {
				continue
			}
			length := k + 1 - start
			tgt := &best[k+1]
			if t.types[id] == spUserDefined {
				// SentencePiece: (length * max_score_ - 0.1) is a double, summed and compared
				// in double, stored as float.
				score := float64(float32(float32(length)*t.maxScore)) - 0.1
				if cand := score + float64(base); tgt.start < 0 || cand > float64(tgt.score) {
					*tgt = node{float32(cand), int32(start), id}
				}
			} else if cand := float32(t.scores[id] + base); tgt.start < 0 || cand > tgt.score {
				*tgt = node{cand, int32(start), id}
			}
			if length == mblen {
				hasSingle = true
			}
		}
		if !hasSingle {
			tgt := &best[start+mblen]
			if cand := float32(unkScore + base); tgt.start < 0 || cand > tgt.score {
				*tgt = node{cand, int32(start), t.unk}
			}
		}
		start += mblen
	}
	var segs []spSegment
	for end := int32(len(s)); end > 0; end = best[end].start {
		segs = append(segs, spSegment{best[end].start, end, best[end].id})
	}
	for i, j := 0, len(segs)-1; i < j; i, j = i+1, j-1 {
		segs[i], segs[j] = segs[j], segs[i]
	}
	return segs
}

// spCharLen is SentencePiece's OneCharLen: the UTF-8 length its lead byte announces (1
// for a continuation byte).
func spCharLen(b byte) int {
	switch b >> 4 {
	case 0xC, 0xD:
		return 2
	case 0xE:
		return 3
	case 0xF:
		return 4
	}
	return 1
}

// Decode is SentencePiece's DecodeIds: control pieces vanish, <unk> is " ⁇ ", runs of
// byte pieces are decoded as UTF-8 (an invalid byte becomes U+FFFD), "▁" becomes a space,
// and the leading "▁" of the first text piece is dropped. Appended sentinels decode to
// "<extra_id_N>". It panics if an id is outside [0, VocabSize).
func (t *SentencePiece) Decode(ids []int32) string {
	var text strings.Builder
	var bytes []byte
	flushBytes := func() {
		for b := bytes; len(b) > 0; {
			r, n := utf8.DecodeRune(b)
			if r == utf8.RuneError && n <= 1 {
				text.WriteString("\uFFFD")
				n = 1
			} else {
				text.Write(b[:n])
			}
			b = b[n:]
		}
		bytes = bytes[:0]
	}
	bosWS, bosWSSeen := true, false
	for _, id := range ids {
		if id < 0 || int(id) >= t.VocabSize() {
			panic(fmt.Sprintf("data: SentencePiece.Decode: id %d outside [0, %d)", id, t.VocabSize()))
		}
		if int(id) < len(t.pieces) && t.types[id] == spByte {
			if b := t.byteOf[id]; b >= 0 {
				bytes = append(bytes, byte(b))
			}
			continue
		}
		flushBytes()
		if bosWSSeen || text.Len() > 0 {
			bosWS = false
		}
		var piece string
		piece, bosWSSeen = t.decodePiece(id, bosWS)
		text.WriteString(piece)
	}
	flushBytes()
	return text.String()
}

// decodePiece is DecodeSentencePiece: one non-byte id's text, and whether it consumed the
// sentence's leading "▁".
func (t *SentencePiece) decodePiece(id int32, bosWS bool) (string, bool) {
	if int(id) >= len(t.pieces) {
		return fmt.Sprintf("<extra_id_%d>", len(t.pieces)+t.extra-1-int(id)), false
	}
	switch t.types[id] {
	case spControl:
		return "", false
	case spUnknown:
		return t.unkSurface, false
	}
	piece, consumed := t.pieces[id], false
	if bosWS && (t.norm.addDummyPrefix || t.norm.removeExtraWS) {
		piece, consumed = strings.CutPrefix(piece, spaceMarker)
		if t.norm.removeExtraWS {
			consumed = false
		}
	}
	return strings.ReplaceAll(piece, spaceMarker, " "), consumed
}
