package data

import (
	"fmt"
	"slices"
	"strconv"
)

func init() {
	tokenizerTypes["TikTokenizer"] = func(c TokenizerConfig) (Tokenizer, error) {
		return LoadTikTokenizer(c.TokenizerModel, TikTokenConfig{Pattern: c.TiktokenPattern,
			NumSpecialTokens: c.TiktokenNumSpecialTokens, SpecialTokens: c.SpecialTokens, VocabSize: c.VocabSize})
	}
}

// TikTokenConfig are the settings of Megatron's TikTokenizer; the zero value means
// Megatron's defaults.
type TikTokenConfig struct {
	// Pattern is --tiktoken-pattern, the pre-tokenizer: "v1" (cl100k_base-style) or "v2"
	// (o200k_base-style, the default).
	Pattern string
	// NumSpecialTokens is --tiktoken-num-special-tokens (default 1000): the special
	// tokens take ids 0..NumSpecialTokens-1 and the vocabulary's ranks follow.
	NumSpecialTokens int
	// SpecialTokens is --tokenizer-special-tokens (alias --tiktoken-special-tokens): the
	// first special tokens, in id order; it must hold DefaultTikTokenSpecial's, which are
	// the default. The rest up to NumSpecialTokens are "<SPECIAL_i>" with i the id.
	SpecialTokens []string
	// VocabSize is --vocab-size (default 131072): the number of ids, special tokens
	// included. The vocabulary file's first VocabSize − NumSpecialTokens ranks are used;
	// it must have that many.
	VocabSize int
}

// Megatron's TikTokenizer defaults.
const (
	DefaultTikTokenVocabSize  = 1 << 17
	DefaultTikTokenNumSpecial = 1000
)

// TikTokenNumSpecialFlag is the flag.Func of --tiktoken-num-special-tokens: it stores
// the value in dst and refuses one below 1, as Megatron does (a zero
// TikTokenConfig.NumSpecialTokens means the default, so a 0 on the command line must not
// silently become 1000).
func TikTokenNumSpecialFlag(dst *int) func(string) error {
	return func(s string) error {
		n, err := strconv.Atoi(s)
		if err != nil {
			return fmt.Errorf("%q is not an integer", s)
		}
		if n < 1 {
			return fmt.Errorf("%d: want at least 1 (the special tokens take the first ids)", n)
		}
		*dst = n
		return nil
	}
}

// DefaultTikTokenSpecial returns Megatron's TikTokenizer special tokens in id order:
// <unk> <s> </s> <mask> <pad> <cls> <sep>.
func DefaultTikTokenSpecial() []string {
	return []string{"<unk>", "<s>", "</s>", "<mask>", "<pad>", "<cls>", "<sep>"}
}

// tiktokenMaxVocab bounds --vocab-size, checked before allocating.
const tiktokenMaxVocab = 1 << 24

// withDefaults returns c with its zero fields set to Megatron's defaults, or an error
// if the settings are inconsistent (as Megatron's assertions find them).
func (c TikTokenConfig) withDefaults() (TikTokenConfig, error) {
	if c.Pattern == "" {
		c.Pattern = "v2"
	}
	if c.NumSpecialTokens == 0 {
		c.NumSpecialTokens = DefaultTikTokenNumSpecial
	}
	if c.SpecialTokens == nil {
		c.SpecialTokens = DefaultTikTokenSpecial()
	}
	if c.VocabSize == 0 {
		c.VocabSize = DefaultTikTokenVocabSize
	}
	switch {
	case c.VocabSize < 0 || c.VocabSize > tiktokenMaxVocab:
		return c, fmt.Errorf("--vocab-size %d outside [1, %d]", c.VocabSize, tiktokenMaxVocab)
	case c.NumSpecialTokens < len(c.SpecialTokens) || c.NumSpecialTokens >= c.VocabSize:
		return c, fmt.Errorf("--tiktoken-num-special-tokens %d: want at least the %d special tokens and less than --vocab-size %d",
			c.NumSpecialTokens, len(c.SpecialTokens), c.VocabSize)
	}
	seen := map[string]bool{}
	for _, s := range c.SpecialTokens {
		if seen[s] || s == "" {
			return c, fmt.Errorf("special token %q is empty or given twice", s)
		}
		seen[s] = true
	}
	for _, s := range DefaultTikTokenSpecial() {
		if !seen[s] {
			return c, fmt.Errorf("special tokens %q lack %s: they must include %q", c.SpecialTokens, s, DefaultTikTokenSpecial())
		}
	}
	for i := len(c.SpecialTokens); i < c.NumSpecialTokens; i++ {
		if s := fmt.Sprintf("<SPECIAL_%d>", i); seen[s] {
			return c, fmt.Errorf("special token %s is also the filler of id %d", s, i)
		}
	}
	return c, nil
}

// TikTokenizer is Megatron's TikTokenizer: a tiktoken byte-level BPE whose vocabulary is a
// list of ranks (see LoadTikTokenizer), with NumSpecialTokens special tokens taking the
// first ids and rank r becoming id NumSpecialTokens + r. Encoding finds the special
// tokens in the text first (Megatron encodes with allowed_special="all", so "<s>" in text
// is BOS; the longest special token at the leftmost position wins), cuts the text between
// them with the v1 or v2 pattern, and turns each word into the id of its bytes if it has
// one, else merges its bytes as tiktoken does: the adjacent pair whose concatenation has
// the lowest rank first. Decode returns the bytes of the ids, special tokens as their
// text. A TikTokenizer is immutable and safe for concurrent use.
type TikTokenizer struct {
	numSpecial int32
	pieces     []string         // [V] the bytes of each id; special tokens' text
	ids        map[string]int32 // bytes of a vocabulary token → its id
	rules      bpeRules
	wordEnd    func(text string, i int) int
	specials   map[string]int32 // special token → id
	// specialLens lists, for each first byte, the lengths of the special tokens that start
	// with it, longest first.
	specialLens [256][]int
	special     SpecialIDs
	cache       wordCache
}

// newTikTokenizer builds a TikTokenizer from the vocabulary's tokens in rank order (as
// many as c.VocabSize − c.NumSpecialTokens) and c with defaults set.
func newTikTokenizer(tokens []string, c TikTokenConfig) (*TikTokenizer, error) {
	wordEnd, err := tiktokenScanner(c.Pattern)
	if err != nil {
		return nil, err
	}
	ns := int32(c.NumSpecialTokens)
	t := &TikTokenizer{numSpecial: ns, pieces: make([]string, 0, c.VocabSize), wordEnd: wordEnd,
		ids: make(map[string]int32, len(tokens)), specials: make(map[string]int32, c.NumSpecialTokens)}
	for i := range c.NumSpecialTokens {
		s := fmt.Sprintf("<SPECIAL_%d>", i)
		if i < len(c.SpecialTokens) {
			s = c.SpecialTokens[i]
		}
		t.pieces = append(t.pieces, s)
		t.specials[s] = int32(i)
		t.specialLens[s[0]] = append(t.specialLens[s[0]], len(s))
	}
	for b := range t.specialLens {
		l := t.specialLens[b]
		slices.Sort(l)
		slices.Reverse(l)
		t.specialLens[b] = slices.Compact(l)
	}
	for r, tok := range tokens {
		t.pieces = append(t.pieces, tok)
		t.ids[tok] = ns + int32(r)
	}
	// Every split of a token into two tokens is a merge of the token's rank: tiktoken
	// ranks a pair by its concatenation.
	t.rules = make(bpeRules, len(tokens))
	for r, tok := range tokens {
		for k := 1; k < len(tok); k++ {
			a, okA := t.ids[tok[:k]]
			b, okB := t.ids[tok[k:]]
			if okA && okB {
				t.rules[pairKey(a, b)] = bpeMerge{rank: int32(r), id: ns + int32(r)}
			}
		}
	}
	s := &t.special
	*s = NoSpecial()
	for _, e := range []struct {
		name string
		id   *int32
	}{{"<s>", &s.BOS}, {"</s>", &s.EOS}, {"<mask>", &s.Mask}, {"<pad>", &s.Pad}, {"<cls>", &s.CLS}, {"<sep>", &s.SEP}} {
		*e.id = t.specials[e.name]
	}
	s.EOD = s.EOS
	return t, nil
}

// Encode returns the ids of text.
func (t *TikTokenizer) Encode(text string) []int32 {
	var ids []int32
	from := 0
	for i := 0; i < len(text); i++ {
		for _, n := range t.specialLens[text[i]] {
			if i+n > len(text) {
				continue
			}
			if id, ok := t.specials[text[i:i+n]]; ok {
				ids = t.encodeOrdinary(ids, text[from:i])
				ids = append(ids, id)
				from, i = i+n, i+n-1
				break
			}
		}
	}
	return t.encodeOrdinary(ids, text[from:])
}

// encodeOrdinary appends the ids of text, which holds no special token.
func (t *TikTokenizer) encodeOrdinary(dst []int32, text string) []int32 {
	for i := 0; i < len(text); {
		j := t.wordEnd(text, i)
		dst = t.appendWord(dst, text[i:j])
		i = j
	}
	return dst
}

// appendWord appends the ids of one pre-tokenized word.
func (t *TikTokenizer) appendWord(dst []int32, w string) []int32 {
	if id, ok := t.ids[w]; ok {
		return append(dst, id)
	}
	if ids, ok := t.cache.get(w); ok {
		return append(dst, ids...)
	}
	syms := make([]int32, len(w))
	for i := range len(w) {
		syms[i] = t.numSpecial + int32(w[i]) // rank b is the byte b
	}
	syms = t.rules.merge(syms)
	t.cache.put(w, syms)
	return append(dst, syms...)
}

// Decode returns the bytes the ids stand for, concatenated, special tokens as their text.
// The result is not valid UTF-8 where ids split a character (Megatron's decode writes
// U+FFFD there; apply strings.ToValidUTF8 for that). It panics if an id is outside
// [0, VocabSize).
func (t *TikTokenizer) Decode(ids []int32) string { return joinPieces("TikTokenizer", t.pieces, ids) }

// VocabSize returns the number of ids, special tokens included (--vocab-size).
func (t *TikTokenizer) VocabSize() int { return len(t.pieces) }

// NumSpecialTokens returns the number of special tokens, the first ids.
func (t *TikTokenizer) NumSpecialTokens() int { return int(t.numSpecial) }

// Special returns the ids of <s> (BOS), </s> (EOS and EOD, as in Megatron), <mask>,
// <pad>, <cls> and <sep>.
func (t *TikTokenizer) Special() SpecialIDs { return t.special }

// TokenID returns the id of a special token's text or of a vocabulary token's bytes.
func (t *TikTokenizer) TokenID(tok string) (int32, bool) {
	if id, ok := t.specials[tok]; ok {
		return id, true
	}
	id, ok := t.ids[tok]
	return id, ok
}
