package data

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

func init() {
	tokenizerTypes["BertWordPieceLowerCase"] = func(c TokenizerConfig) (Tokenizer, error) {
		return LoadBertWordPiece(c.VocabFile, true, c.VocabExtraIDs)
	}
	tokenizerTypes["BertWordPieceCase"] = func(c TokenizerConfig) (Tokenizer, error) {
		return LoadBertWordPiece(c.VocabFile, false, c.VocabExtraIDs)
	}
}

// wordPieceMaxChars is BERT's max_input_chars_per_word: longer words become [UNK].
const wordPieceMaxChars = 100

// BertWordPiece is BERT's WordPiece tokenizer (Megatron's BertWordPieceLowerCase and
// BertWordPieceCase). Encoding runs BERT's basic tokenizer (drop NUL, U+FFFD and
// control characters, turn whitespace into spaces, put spaces around CJK ideographs,
// split on whitespace, lower-case and strip accents (NFD, then drop Mn) in the uncased
// variant, split off each punctuation character), then greedy longest-match-first
// WordPiece on each word, continuation pieces prefixed "##", a word that cannot be
// covered (or has over 100 characters) becoming [UNK].
//
// As Megatron does, it appends [BOS] and [EOS] to the vocabulary when vocab.txt lacks
// them, then the T5 sentinels <extra_id_0>..<extra_id_N-1> in order; EOD is [EOS].
// A BertWordPiece is immutable and safe for concurrent use.
type BertWordPiece struct {
	ids     map[string]int32
	tokens  []string // [V] the token of each id
	lower   bool
	unk     int32
	special SpecialIDs
}

// LoadBertWordPiece reads vocab.txt (one token a line; its line number, from 0, is its
// id) and appends extraIDs sentinels. lowerCase selects the uncased variant. Errors name
// the file.
func LoadBertWordPiece(vocabFile string, lowerCase bool, extraIDs int) (*BertWordPiece, error) {
	f, err := os.Open(vocabFile)
	if err != nil {
		return nil, fmt.Errorf("data: BERT vocabulary: %w", err)
	}
	defer f.Close()
	t, err := ReadBertWordPiece(f, lowerCase, extraIDs)
	if err != nil {
		return nil, fmt.Errorf("data: BERT vocabulary %s: %w", vocabFile, err)
	}
	return t, nil
}

// ReadBertWordPiece is LoadBertWordPiece reading vocab.txt from r.
func ReadBertWordPiece(r io.Reader, lowerCase bool, extraIDs int) (*BertWordPiece, error) {
	if extraIDs < 0 {
		return nil, fmt.Errorf("negative number of extra ids %d", extraIDs)
	}
	t := &BertWordPiece{ids: make(map[string]int32), lower: lowerCase}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		t.tokens = append(t.tokens, strings.TrimSpace(sc.Text())) // as Megatron's token.strip()
		t.ids[t.tokens[len(t.tokens)-1]] = int32(len(t.tokens) - 1)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	id := func(tok string) (int32, error) {
		if v, ok := t.ids[tok]; ok {
			return v, nil
		}
		return -1, fmt.Errorf("no %s token", tok)
	}
	t.special = NoSpecial()
	var err error
	for _, s := range []struct {
		tok string
		dst *int32
	}{{"[UNK]", &t.unk}, {"[CLS]", &t.special.CLS}, {"[SEP]", &t.special.SEP}, {"[PAD]", &t.special.Pad}, {"[MASK]", &t.special.Mask}} {
		if *s.dst, err = id(s.tok); err != nil {
			return nil, err
		}
	}
	t.special.BOS = t.addToken("[BOS]")
	t.special.EOS = t.addToken("[EOS]")
	t.special.EOD = t.special.EOS
	for i := range extraIDs {
		t.special.Sentinels = append(t.special.Sentinels, t.addToken(fmt.Sprintf("<extra_id_%d>", i)))
	}
	return t, nil
}

// addToken returns the id of tok, appending it to the vocabulary if it is not there.
func (t *BertWordPiece) addToken(tok string) int32 {
	if v, ok := t.ids[tok]; ok {
		return v
	}
	t.tokens = append(t.tokens, tok)
	t.ids[tok] = int32(len(t.tokens) - 1)
	return int32(len(t.tokens) - 1)
}

// Encode returns the ids of text.
func (t *BertWordPiece) Encode(text string) []int32 {
	var ids []int32
	for _, w := range bertBasicTokens(text, t.lower) {
		ids = t.appendWordPieces(ids, w)
	}
	return ids
}

// Tokens returns the WordPiece tokens of text (Encode without the id lookup).
func (t *BertWordPiece) Tokens(text string) []string {
	var toks []string
	for _, id := range t.Encode(text) {
		toks = append(toks, t.tokens[id])
	}
	return toks
}

// appendWordPieces appends the greedy longest-match-first WordPiece ids of word.
func (t *BertWordPiece) appendWordPieces(dst []int32, word string) []int32 {
	return wordPieces(dst, word, t.ids, "##", wordPieceMaxChars, t.unk)
}

// Decode joins the tokens with spaces and glues "##" pieces to the token before them,
// as Megatron's decode (convert_tokens_to_string) does. It panics if an id is outside
// [0, VocabSize).
func (t *BertWordPiece) Decode(ids []int32) string {
	toks := make([]string, len(ids))
	for i, id := range ids {
		if id < 0 || int(id) >= len(t.tokens) {
			panic(fmt.Sprintf("data: BertWordPiece.Decode: id %d outside [0, %d)", id, len(t.tokens)))
		}
		toks[i] = t.tokens[id]
	}
	return strings.TrimSpace(strings.ReplaceAll(strings.Join(toks, " "), " ##", ""))
}

// VocabSize returns the number of ids: vocab.txt's lines, the added [BOS] and [EOS], and
// the sentinels.
func (t *BertWordPiece) VocabSize() int { return len(t.tokens) }

// Special returns [CLS], [SEP], [PAD], [MASK], [BOS], [EOS] (also EOD) and the sentinels.
func (t *BertWordPiece) Special() SpecialIDs {
	s := t.special
	s.Sentinels = append([]int32(nil), t.special.Sentinels...)
	return s
}

// bertBasicTokens is BERT's BasicTokenizer: the words WordPiece then splits.
func bertBasicTokens(text string, lower bool) []string {
	var b strings.Builder
	for _, r := range text {
		switch {
		case r == 0 || r == utf8.RuneError || bertIsControl(r):
		case bertIsWhitespace(r):
			b.WriteByte(' ')
		case bertIsCJK(r):
			b.WriteByte(' ')
			b.WriteRune(r)
			b.WriteByte(' ')
		default:
			b.WriteRune(r)
		}
	}
	var out []string
	for _, w := range strings.Fields(b.String()) {
		if lower {
			w = bertStripAccents(pyLower(w))
		}
		start := 0
		for i, r := range w {
			if bertIsPunct(r) {
				if start < i {
					out = append(out, w[start:i])
				}
				out = append(out, string(r))
				start = i + utf8.RuneLen(r)
			}
		}
		if start < len(w) {
			out = append(out, w[start:])
		}
	}
	return out
}

// bertIsWhitespace is BERT's _is_whitespace: space, \t, \n, \r, or category Zs.
func bertIsWhitespace(r rune) bool {
	return r == ' ' || r == '\t' || r == '\n' || r == '\r' || unicode.Is(unicode.Zs, r)
}

// bertIsControl is BERT's _is_control (Google's and Megatron's copy): any category C
// (Cc, Cf, Co, Cs, or unassigned Cn) except \t, \n, \r.
func bertIsControl(r rune) bool {
	if r == '\t' || r == '\n' || r == '\r' {
		return false
	}
	return unicode.In(r, unicode.Cc, unicode.Cf, unicode.Co, unicode.Cs) ||
		!unicode.In(r, unicode.L, unicode.M, unicode.N, unicode.P, unicode.S, unicode.Z, unicode.C)
}

// bertIsPunct is BERT's _is_punctuation: all non-alphanumeric printable ASCII, and
// category P.
func bertIsPunct(r rune) bool {
	return r >= 33 && r <= 47 || r >= 58 && r <= 64 || r >= 91 && r <= 96 || r >= 123 && r <= 126 ||
		unicode.IsPunct(r)
}

// bertIsCJK is BERT's _is_chinese_char: the CJK Unified Ideographs blocks.
func bertIsCJK(r rune) bool {
	return r >= 0x4E00 && r <= 0x9FFF || r >= 0x3400 && r <= 0x4DBF || r >= 0x20000 && r <= 0x2A6DF ||
		r >= 0x2A700 && r <= 0x2B73F || r >= 0x2B740 && r <= 0x2B81F || r >= 0x2B820 && r <= 0x2CEAF ||
		r >= 0xF900 && r <= 0xFAFF || r >= 0x2F800 && r <= 0x2FA1F
}

// bertStripAccents is BERT's _run_strip_accents: NFD, then drop nonspacing marks (Mn).
func bertStripAccents(s string) string {
	var b strings.Builder
	for _, r := range norm.NFD.String(s) {
		if !unicode.Is(unicode.Mn, r) {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// pyLower is Python's str.lower for one whitespace-free word: unicode.ToLower per
// character, except that a capital sigma that ends a word (after a cased letter, with no
// cased letter after it, case-ignorable characters skipped) becomes final sigma 'ς'.
// Python's other special lower-casing, 'İ' → "i̇", differs from Go's 'i' only by a
// combining dot that accent stripping removes.
func pyLower(w string) string {
	if !strings.ContainsRune(w, 'Σ') {
		return strings.ToLower(w)
	}
	rs := []rune(w)
	cased := func(r rune) bool { return unicode.IsUpper(r) || unicode.IsLower(r) || unicode.IsTitle(r) }
	ignorable := func(r rune) bool {
		return unicode.In(r, unicode.Mn, unicode.Me, unicode.Cf, unicode.Lm, unicode.Sk) ||
			r == '\'' || r == '.' || r == ':' || r == '·' || r == '’'
	}
	out := make([]rune, len(rs))
	for i, r := range rs {
		out[i] = unicode.ToLower(r)
		if r != 'Σ' {
			continue
		}
		before, after := false, false
		for j := i - 1; j >= 0; j-- {
			if !ignorable(rs[j]) {
				before = cased(rs[j])
				break
			}
		}
		for j := i + 1; j < len(rs); j++ {
			if !ignorable(rs[j]) {
				after = cased(rs[j])
				break
			}
		}
		if before && !after {
			out[i] = 'ς'
		}
	}
	return string(out)
}
