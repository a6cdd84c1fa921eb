package data

import (
	"bufio"
	"os"
	"slices"
	"strings"
	"testing"
)

const bertVocabFile = "testdata/tokenizer/bert_vocab.txt"

// vocabLines reads vocab.txt directly: token → line number, the id BERT gives it.
func vocabLines(t *testing.T) map[string]int32 {
	t.Helper()
	f, err := os.Open(bertVocabFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m := map[string]int32{}
	sc := bufio.NewScanner(f)
	for i := int32(0); sc.Scan(); i++ {
		m[sc.Text()] = i
	}
	return m
}

// TestBertWordPiece checks tokens derived by hand from BERT's algorithm on the committed
// 38-line vocabulary.
func TestBertWordPiece(t *testing.T) {
	lines := vocabLines(t)
	long := strings.Repeat("a", wordPieceMaxChars)
	longPieces := append([]string{"a"}, slices.Repeat([]string{"##a"}, wordPieceMaxChars-1)...)
	for _, c := range []struct {
		name  string
		lower bool
		in    string
		want  []string // tokens; ids are their vocab.txt lines
	}{
		{"wordpiece", true, "UNAFFABLE", []string{"un", "##aff", "##able"}},
		{"sentence", true, "The quick brown fox jumps over the lazy dog.",
			[]string{"the", "quick", "brown", "fox", "jump", "##s", "over", "the", "lazy", "dog", "."}},
		{"punct split", true, "Running!", []string{"run", "##ning", "!"}},
		{"accents stripped", true, "Café naïve", []string{"cafe", "naive"}},
		{"comma glued", true, "Hello,world", []string{"hello", ",", "world"}},
		{"cjk split", true, "中文", []string{"中", "文"}},
		{"controls dropped", true, "he\x00llo\u200b", []string{"hello"}},
		{"nbsp is space", true, "a\u00a0a", []string{"a", "a"}},
		{"final sigma", true, "ΣΟΦΟΣ", []string{"σοφος"}},
		{"no piece", true, "xyz", []string{"[UNK]"}},
		{"uncoverable tail", true, "unx", []string{"[UNK]"}},
		// "s" starts a word after the split, and only "##s" is in the vocabulary.
		{"apostrophe", true, "fox's", []string{"fox", "'", "[UNK]"}},
		{"100 chars", true, long, longPieces},
		{"101 chars", true, long + "a", []string{"[UNK]"}},
		{"cased", false, "Hello The Café", []string{"Hello", "The", "Café"}},
		{"cased no lower", false, "HELLO hello", []string{"[UNK]", "hello"}},
		{"cased keeps accents", false, "naïve", []string{"[UNK]"}},
	} {
		tok, err := LoadBertWordPiece(bertVocabFile, c.lower, 0)
		if err != nil {
			t.Fatal(err)
		}
		var want []int32
		for _, w := range c.want {
			id, ok := lines[w]
			if !ok {
				t.Fatalf("%s: %q is not in %s", c.name, w, bertVocabFile)
			}
			want = append(want, id)
		}
		if got := tok.Encode(c.in); !slices.Equal(got, want) {
			t.Errorf("%s: Encode(%q) = %v %q, want %v %q", c.name, c.in, got, tok.Tokens(c.in), want, c.want)
		}
	}
}

// TestBertWordPieceSpecial checks the special ids, Megatron's added tokens and Decode.
func TestBertWordPieceSpecial(t *testing.T) {
	const extra = 3
	tok, err := NewTokenizer(TokenizerConfig{Type: "BertWordPieceLowerCase", VocabFile: bertVocabFile, VocabExtraIDs: extra})
	if err != nil {
		t.Fatal(err)
	}
	lines := vocabLines(t)
	n := int32(len(lines)) // vocab.txt has [EOS] but not [BOS]: [BOS] is appended at n
	want := SpecialIDs{EOD: lines["[EOS]"], Pad: lines["[PAD]"], Mask: lines["[MASK]"], CLS: lines["[CLS]"],
		SEP: lines["[SEP]"], BOS: n, EOS: lines["[EOS]"], Sentinels: []int32{n + 1, n + 2, n + 3}}
	got := tok.Special()
	if got.EOD != want.EOD || got.Pad != want.Pad || got.Mask != want.Mask || got.CLS != want.CLS ||
		got.SEP != want.SEP || got.BOS != want.BOS || got.EOS != want.EOS || !slices.Equal(got.Sentinels, want.Sentinels) {
		t.Errorf("Special() = %+v, want %+v", got, want)
	}
	if tok.VocabSize() != int(n)+1+extra {
		t.Errorf("VocabSize %d, want %d", tok.VocabSize(), int(n)+1+extra)
	}
	if d := tok.Decode(tok.Encode("UNAFFABLE Running!")); d != "unaffable running !" {
		t.Errorf("Decode = %q", d)
	}
	if d := tok.Decode([]int32{n + 1}); d != "<extra_id_0>" {
		t.Errorf("Decode(sentinel 0) = %q", d)
	}
	if _, err := ReadBertWordPiece(strings.NewReader("[PAD]\n[UNK]\n"), true, 0); err == nil ||
		!strings.Contains(err.Error(), "[CLS]") {
		t.Errorf("vocabulary without [CLS]: err = %v", err)
	}
}
