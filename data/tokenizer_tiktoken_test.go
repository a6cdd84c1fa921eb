package data

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
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

// BenchmarkTikTokenizerEncode encodes two inputs, BenchmarkGPT2Encode's and the golden
// texts (multilingual), with GPT-2's BPE and with the test vocabulary under each pattern,
// for comparing their MB/s.
func BenchmarkTikTokenizerEncode(b *testing.B) {
	f, err := os.ReadFile("testdata/tokenizer/gpt2_cases.txt")
	if err != nil {
		b.Fatal(err)
	}
	var golden []string
	for _, c := range readTikGolden(b).Cases {
		if c.Name == "full-v1" {
			golden = append(golden, c.Text)
		}
	}
	inputs := []struct{ name, text string }{{"gpt2_cases", strings.Repeat(string(f), 20)},
		{"multilingual", strings.Repeat(strings.Join(golden, "\n"), 20)}}
	toks := []struct {
		name string
		tok  Tokenizer
	}{{"gpt2", BuiltinGPT2()}, {"tiktoken-v1", loadTestTik(b, TikTokenConfig{Pattern: "v1", VocabSize: 9000})},
		{"tiktoken-v2", loadTestTik(b, TikTokenConfig{Pattern: "v2", VocabSize: 9000})}}
	for _, in := range inputs {
		for _, c := range toks {
			b.Run(in.name+"/"+c.name, func(b *testing.B) {
				ntok := len(c.tok.Encode(in.text))
				b.SetBytes(int64(len(in.text)))
				for b.Loop() {
					c.tok.Encode(in.text)
				}
				b.ReportMetric(float64(ntok)*float64(b.N)/b.Elapsed().Seconds(), "tok/s")
			})
		}
	}
}
