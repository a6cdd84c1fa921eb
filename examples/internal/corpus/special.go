package corpus

import (
	"fmt"
	"strings"

	"megago/data"
)

// Extended is a tokenizer with special tokens appended to a base vocabulary that lacks
// them, as Megatron adds [BOS], [EOS] and <extra_id_N> to a WordPiece vocabulary: the
// base's ids keep their meaning and the added names get ids VocabSize(base),
// VocabSize(base)+1, ... in order. Text never encodes to an added id; Decode writes an
// added id as its name. It is safe for concurrent use.
type Extended struct {
	base    data.Tokenizer
	names   []string
	special data.SpecialIDs
}

// Names of the special tokens Extend knows; T5's sentinels are Sentinel(i).
const (
	CLS  = "[CLS]"
	SEP  = "[SEP]"
	Mask = "[MASK]"
	Pad  = "[PAD]"
	BOS  = "[BOS]"
	EOS  = "[EOS]"
)

// Sentinel returns the name of T5's sentinel i, "<extra_id_i>".
func Sentinel(i int) string { return fmt.Sprintf("<extra_id_%d>", i) }

// Extend returns base with the special tokens names appended: CLS, SEP, Mask, Pad, BOS,
// EOS and Sentinel(0), Sentinel(1), ... (in that order among the sentinels) set the
// matching field of Special; the base's other special ids stay. It panics if a name is
// not one of these or is given twice, or if the sentinels are out of order.
func Extend(base data.Tokenizer, names ...string) *Extended {
	t := &Extended{base: base, names: names, special: base.Special()}
	t.special.Sentinels = append([]int32(nil), t.special.Sentinels...)
	fields := map[string]*int32{CLS: &t.special.CLS, SEP: &t.special.SEP, Mask: &t.special.Mask, Pad: &t.special.Pad,
		BOS: &t.special.BOS, EOS: &t.special.EOS}
	seen := map[string]bool{}
	sentinels := 0
	for i, n := range names {
		id := int32(base.VocabSize() + i)
		switch f, ok := fields[n]; {
		case seen[n]:
			panic(fmt.Sprintf("corpus: Extend: %s given twice", n))
		case ok:
			*f = id
		case n == Sentinel(sentinels):
			t.special.Sentinels = append(t.special.Sentinels, id)
			sentinels++
		default:
			panic(fmt.Sprintf("corpus: Extend: unknown special token %q (want [CLS], [SEP], [MASK], [PAD], [BOS], [EOS] or %s)", n, Sentinel(sentinels)))
		}
		seen[n] = true
	}
	return t
}

// Encode returns the base tokenizer's ids of text.
func (t *Extended) Encode(text string) []int32 { return t.base.Encode(text) }

// Decode returns the text of ids, an added id as its name. It panics on an id outside
// [0, VocabSize()).
func (t *Extended) Decode(ids []int32) string {
	var b strings.Builder
	n := int32(t.base.VocabSize())
	for len(ids) > 0 {
		k := 0
		for k < len(ids) && ids[k] < n {
			k++
		}
		b.WriteString(t.base.Decode(ids[:k]))
		ids = ids[k:]
		if len(ids) > 0 {
			b.WriteString(t.Name(ids[0]))
			ids = ids[1:]
		}
	}
	return b.String()
}

// Name returns the name of an added id ("" for a base id). It panics on an id outside
// [0, VocabSize()).
func (t *Extended) Name(id int32) string {
	n := int32(t.base.VocabSize())
	if id < 0 || int(id) >= t.VocabSize() {
		panic(fmt.Sprintf("corpus: Extended.Decode: id %d outside [0, %d)", id, t.VocabSize()))
	}
	if id < n {
		return ""
	}
	return t.names[id-n]
}

// VocabSize returns the base's vocabulary size plus the added tokens.
func (t *Extended) VocabSize() int { return t.base.VocabSize() + len(t.names) }

// Special returns the base's special ids with the added ones set.
func (t *Extended) Special() data.SpecialIDs {
	s := t.special
	s.Sentinels = append([]int32(nil), s.Sentinels...)
	return s
}
