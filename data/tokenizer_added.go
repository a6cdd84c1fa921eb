package data

import (
	"fmt"
	"strings"
)

// AddedSpecial lists the special tokens AddSpecialTokens appends to a vocabulary. Each
// non-empty name becomes one new id, in the order CLS, SEP, Mask, Pad, BOS, EOS, then
// the sentinels. Names are delimited, "<...>" or "[...]" with no closing character
// inside, so that Encode can find them in text.
type AddedSpecial struct {
	CLS, SEP, Mask, Pad, BOS, EOS string
	// ExtraIDs is the number of T5 sentinels <extra_id_0>, <extra_id_1>, ... appended
	// last, in that order (Megatron's order for --vocab-extra-ids; Hugging Face's T5
	// vocabulary numbers them downward from its last id instead).
	ExtraIDs int
}

// AddedTokens is a tokenizer with special tokens appended after the ids of a base
// tokenizer: added token i has id base.VocabSize()+i. It encodes the added tokens'
// names where they occur in text and the rest with the base; it decodes added ids to
// their names. It is safe for concurrent use.
type AddedTokens struct {
	base    Tokenizer
	names   []string         // [added]
	ids     map[string]int32 // name → id
	longest int              // bytes of the longest name
	special SpecialIDs
}

// AddSpecialTokens returns base with the tokens of add appended. It returns an error if
// a name is not delimited or repeats, if base already has the role a name is given for,
// or if ExtraIDs is negative or base already has sentinels and ExtraIDs > 0.
func AddSpecialTokens(base Tokenizer, add AddedSpecial) (*AddedTokens, error) {
	t := &AddedTokens{base: base, ids: map[string]int32{}, special: base.Special()}
	s := &t.special
	roles := []struct {
		role, name string
		id         *int32
	}{{"CLS", add.CLS, &s.CLS}, {"SEP", add.SEP, &s.SEP}, {"mask", add.Mask, &s.Mask},
		{"pad", add.Pad, &s.Pad}, {"BOS", add.BOS, &s.BOS}, {"EOS", add.EOS, &s.EOS}}
	for _, r := range roles {
		if r.name == "" {
			continue
		}
		if *r.id >= 0 {
			return nil, fmt.Errorf("data: AddSpecialTokens: %s %q: the tokenizer already has %s id %d", r.role, r.name, r.role, *r.id)
		}
		id, err := t.add(r.name)
		if err != nil {
			return nil, err
		}
		*r.id = id
	}
	switch {
	case add.ExtraIDs < 0:
		return nil, fmt.Errorf("data: AddSpecialTokens: negative number of extra ids %d", add.ExtraIDs)
	case add.ExtraIDs > 0 && len(s.Sentinels) > 0:
		return nil, fmt.Errorf("data: AddSpecialTokens: %d extra ids: the tokenizer already has %d sentinels", add.ExtraIDs, len(s.Sentinels))
	}
	for i := range add.ExtraIDs {
		id, err := t.add(fmt.Sprintf("<extra_id_%d>", i))
		if err != nil {
			return nil, err
		}
		s.Sentinels = append(s.Sentinels, id)
	}
	return t, nil
}

// add appends the token name and returns its id.
func (t *AddedTokens) add(name string) (int32, error) {
	if closing(name) < 0 {
		return -1, fmt.Errorf("data: AddSpecialTokens: name %q is not <...> or [...] with no closing character inside", name)
	}
	if _, dup := t.ids[name]; dup {
		return -1, fmt.Errorf("data: AddSpecialTokens: name %q given twice", name)
	}
	id := int32(t.base.VocabSize() + len(t.names))
	t.names = append(t.names, name)
	t.ids[name] = id
	t.longest = max(t.longest, len(name))
	return id, nil
}

// closing returns the index of the first closing character of a name that starts with
// "<" or "[", if it is the last byte, or -1.
func closing(name string) int {
	if len(name) < 3 {
		return -1
	}
	end := map[byte]byte{'<': '>', '[': ']'}[name[0]]
	if end == 0 {
		return -1
	}
	if i := strings.IndexByte(name, end); i == len(name)-1 {
		return i
	}
	return -1
}

// ForT5 returns base with what T5 span corruption needs and base lacks: a "<pad>" token
// (also the decoder's start), EOS (base's EOD when it has one, else an added "</s>"), and
// extraIDs sentinels <extra_id_0>, <extra_id_1>, ... It is what NewTokenizer does for
// TokenizerConfig.VocabExtraIDs with a tokenizer that has no sentinels of its own.
func ForT5(base Tokenizer, extraIDs int) (*AddedTokens, error) {
	sp := base.Special()
	add := AddedSpecial{ExtraIDs: extraIDs}
	if sp.Pad < 0 {
		add.Pad = "<pad>"
	}
	if sp.EOS < 0 && sp.EOD < 0 {
		add.EOS = "</s>"
	}
	t, err := AddSpecialTokens(base, add)
	if err != nil {
		return nil, err
	}
	if t.special.EOS < 0 {
		t.special.EOS = sp.EOD
	}
	return t, nil
}

// Base returns the tokenizer the tokens were added to.
func (t *AddedTokens) Base() Tokenizer { return t.base }

// Encode returns the ids of text: each added token's name where it occurs, the base's
// encoding of the text between them.
func (t *AddedTokens) Encode(text string) []int32 {
	var ids []int32
	from := 0 // start of the text not yet encoded
	for i := 0; i < len(text); i++ {
		c := text[i]
		if c != '<' && c != '[' {
			continue
		}
		window := text[i+1 : min(len(text), i+t.longest)] // a name's end is within reach
		end := strings.IndexByte(window, map[byte]byte{'<': '>', '[': ']'}[c])
		if end < 0 {
			continue
		}
		id, ok := t.ids[text[i:i+end+2]]
		if !ok {
			continue
		}
		ids = append(append(ids, t.base.Encode(text[from:i])...), id)
		i += end + 1
		from = i + 1
	}
	return append(ids, t.base.Encode(text[from:])...)
}

// Decode returns the text of ids: the base's text for runs of its ids, names for added
// ids. It panics for an id outside [0, VocabSize()).
func (t *AddedTokens) Decode(ids []int32) string {
	var b strings.Builder
	n := int32(t.base.VocabSize())
	run := 0 // start of the current run of base ids
	for i, id := range ids {
		if id < n {
			continue
		}
		if id < 0 || int(id-n) >= len(t.names) {
			panic(fmt.Sprintf("data: AddedTokens.Decode: id %d outside [0, %d)", id, t.VocabSize()))
		}
		b.WriteString(t.base.Decode(ids[run:i]))
		b.WriteString(t.names[id-n])
		run = i + 1
	}
	b.WriteString(t.base.Decode(ids[run:]))
	return b.String()
}

// VocabSize returns the base's vocabulary size plus the added tokens.
func (t *AddedTokens) VocabSize() int { return t.base.VocabSize() + len(t.names) }

// Special returns the base's special ids with the added ones.
func (t *AddedTokens) Special() SpecialIDs {
	s := t.special
	s.Sentinels = append([]int32(nil), t.special.Sentinels...)
	return s
}
