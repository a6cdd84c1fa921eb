package data

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// tikGoldenDir holds the test vocabulary and golden ids from npm's tiktoken (gen.mjs).
const tikGoldenDir = "testdata/tiktoken"

// tikGolden is testdata/tiktoken/golden.json.
type tikGolden struct {
	Vocab string
	Cases []struct {
		Name             string
		Pattern          string
		VocabSize        int      `json:"vocab_size"`
		NumSpecialTokens int      `json:"num_special_tokens"`
		SpecialTokens    []string `json:"special_tokens"`
		Text             string
		IDs              []int32
	}
}

func readTikGolden(t testing.TB) *tikGolden {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(tikGoldenDir, "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g tikGolden
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	return &g
}

// loadTestTik loads the test vocabulary with c.
func loadTestTik(t testing.TB, c TikTokenConfig) *TikTokenizer {
	t.Helper()
	tok, err := LoadTikTokenizer(filepath.Join(tikGoldenDir, "o200k_8000.json.gz"), c)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestTikTokenizerGolden compares Encode with npm tiktoken's ids for the same ranks,
// pattern and special tokens, and checks that Decode inverts Encode.
func TestTikTokenizerGolden(t *testing.T) {
	g := readTikGolden(t)
	toks := map[string]*TikTokenizer{}
	for _, c := range g.Cases {
		cfg := TikTokenConfig{Pattern: c.Pattern, VocabSize: c.VocabSize, NumSpecialTokens: c.NumSpecialTokens, SpecialTokens: c.SpecialTokens}
		key := fmt.Sprint(cfg)
		tok := toks[key]
		if tok == nil {
			tok = loadTestTik(t, cfg)
			toks[key] = tok
		}
		if got := tok.Encode(c.Text); !slices.Equal(got, c.IDs) {
			t.Errorf("%s: Encode(%q)\n got %v\nwant %v", c.Name, c.Text, got, c.IDs)
		}
		if got := tok.Decode(c.IDs); got != c.Text {
			t.Errorf("%s: Decode(Encode(%q)) = %q", c.Name, c.Text, got)
		}
	}
	if len(toks) != 4 {
		t.Errorf("golden.json has %d settings, want 4", len(toks))
	}
}
