package data

import (
	"bufio"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
)

// spGolden is one line of testdata/tokenizer/spm/golden.jsonl, written by make_golden.py
// with Debian's python3-sentencepiece 0.1.97.
type spGolden struct {
	Model   string  `json:"model"`
	Text    string  `json:"text"`
	IDs     []int32 `json:"ids"`
	Decoded string  `json:"decoded"`
}

func readSPGolden(t *testing.T) []spGolden {
	t.Helper()
	f, err := os.Open("testdata/tokenizer/spm/golden.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows []spGolden
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var g spGolden
		if err := json.Unmarshal(sc.Bytes(), &g); err != nil {
			t.Fatal(err)
		}
		rows = append(rows, g)
	}
	return rows
}

// TestSentencePieceGolden compares Encode and Decode with SentencePiece's own output on
// two tiny unigram models: nmt_nfkc with T5's special layout, and identity normalization
// with byte fallback and a user-defined symbol.
func TestSentencePieceGolden(t *testing.T) {
	toks := map[string]*SentencePiece{}
	for _, name := range []string{"nfkc", "identity"} {
		tok, err := LoadSentencePiece("testdata/tokenizer/spm/"+name+".model", 0)
		if err != nil {
			t.Fatal(err)
		}
		toks[name] = tok
	}
	rows := readSPGolden(t)
	const minRows = 60 // 32 sentences × 2 models
	if len(rows) < minRows {
		t.Fatalf("%d golden rows, want ≥ %d", len(rows), minRows)
	}
	for _, g := range rows {
		tok := toks[g.Model]
		if got := tok.Encode(g.Text); !slices.Equal(got, g.IDs) {
			t.Errorf("%s: Encode(%q) = %v, SentencePiece %v", g.Model, g.Text, got, g.IDs)
		}
		if got := tok.Decode(g.IDs); got != g.Decoded {
			t.Errorf("%s: Decode(%v) = %q, SentencePiece %q", g.Model, g.IDs, got, g.Decoded)
		}
	}
}

// TestSentencePieceSpecial checks the special ids of both models (make_golden.py sets
// them) and the Hugging Face T5 layout of appended sentinels.
func TestSentencePieceSpecial(t *testing.T) {
	const extra = 100
	tok, err := NewTokenizer(TokenizerConfig{Type: "SentencePieceTokenizer",
		VocabFile: "testdata/tokenizer/spm/nfkc.model", VocabExtraIDs: extra})
	if err != nil {
		t.Fatal(err)
	}
	const pieces = 300 // nfkc.model: vocab_size=300, pad=0, eos=1, unk=2, no bos
	s := tok.Special()
	if s.Pad != 0 || s.EOS != 1 || s.EOD != 1 || s.BOS != -1 || s.CLS != -1 {
		t.Errorf("Special() = %+v, want pad 0, eos = eod 1, bos -1, cls -1", s)
	}
	if tok.VocabSize() != pieces+extra || len(s.Sentinels) != extra ||
		s.Sentinels[0] != pieces+extra-1 || s.Sentinels[extra-1] != pieces {
		t.Errorf("VocabSize %d, sentinels %d: first %d last %d; want %d, %d: %d, %d", tok.VocabSize(),
			len(s.Sentinels), s.Sentinels[0], s.Sentinels[len(s.Sentinels)-1], pieces+extra, extra, pieces+extra-1, pieces)
	}
	if d := tok.Decode([]int32{s.Sentinels[0], s.Sentinels[7]}); d != "<extra_id_0><extra_id_7>" {
		t.Errorf("Decode(sentinels) = %q", d)
	}
	id, err := LoadSentencePiece("testdata/tokenizer/spm/identity.model", 0)
	if err != nil {
		t.Fatal(err)
	}
	// identity.model: SentencePiece's default layout unk=0, bos=1, eos=2, no pad.
	if s := id.Special(); s.BOS != 1 || s.EOS != 2 || s.Pad != -1 || len(s.Sentinels) != 0 {
		t.Errorf("identity Special() = %+v", s)
	}
}

// spTestModel serializes a ModelProto with the given pieces (all normal except "<unk>")
// and trainer_spec.model_type.
func spTestModel(modelType uint64, pieces ...string) []byte {
	ps := make([]spProtoPiece, len(pieces))
	for i, p := range pieces {
		ps[i] = spProtoPiece{p, -1, spNormal}
		if p == "<unk>" {
			ps[i].typ = spUnknown
		}
	}
	return spProto(modelType, false, true, ps...)
}

// TestSentencePieceModelErrors checks that unusable models are rejected with a reason,
// and that a minimal hand-made model (no charsmap: identity) segments as its scores say.
func TestSentencePieceModelErrors(t *testing.T) {
	for _, c := range []struct {
		name  string
		model []byte
		want  string
	}{
		{"word", spTestModel(spModelWord, "<unk>", "a"), "neither unigram (1) nor BPE (2)"},
		{"no unk", spTestModel(spModelUnigram, "a", "b"), "no unknown piece"},
		{"duplicate", spTestModel(spModelUnigram, "<unk>", "a", "a"), "defined twice"},
		{"garbage", []byte{0xff, 0xff, 0xff}, "malformed"},
		{"empty", nil, "no pieces"},
	} {
		if _, err := NewSentencePiece(c.model, 0); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want it to mention %q", c.name, err, c.want)
		}
	}
	// Every piece scores -1, so the fewest pieces win: "▁ab" is "▁ab" (one piece) rather
	// than "▁a" "b"; "c" is unknown, and "cc" one <unk>.
	tok, err := NewSentencePiece(spTestModel(spModelUnigram, "<unk>", "▁a", "b", "▁ab", "▁"), 0)
	if err != nil {
		t.Fatal(err)
	}
	const unk, a, b, ab, sp = 0, 1, 2, 3, 4
	for _, c := range []struct {
		in   string
		want []int32
	}{{"ab", []int32{ab}}, {"a b", []int32{a, sp, b}}, {"abcc b", []int32{ab, unk, sp, b}}} {
		if got := tok.Encode(c.in); !slices.Equal(got, c.want) {
			t.Errorf("Encode(%q) = %v, want %v", c.in, got, c.want)
		}
	}
}
