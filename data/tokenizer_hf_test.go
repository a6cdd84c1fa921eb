package data

import (
	"compress/gzip"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// hfGolden is testdata/hf/golden.json, written by testdata/hf/gen.mjs with
// @huggingface/tokenizers.
type hfGolden struct {
	Texts  []string `json:"texts"`
	Models map[string][]struct {
		Special []int32 `json:"special"`
		Plain   []int32 `json:"plain"`
		Decoded string  `json:"decoded"`
	} `json:"models"`
}

func readHFGolden(t testing.TB) *hfGolden {
	t.Helper()
	b, err := os.ReadFile("testdata/hf/golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var g hfGolden
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	return &g
}

// loadTestHF reads testdata/hf/NAME (tokenizer.json.gz and tokenizer_config.json).
func loadTestHF(t testing.TB, name string, includeSpecial bool) *HFTokenizer {
	t.Helper()
	dir := filepath.Join("testdata/hf", name)
	f, err := os.Open(filepath.Join(dir, "tokenizer.json.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := os.Open(filepath.Join(dir, "tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	defer cf.Close()
	tok, err := ReadHFTokenizer(zr, cf, includeSpecial)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return tok
}

func TestHFTokenizerGolden(t *testing.T) {
	g := readHFGolden(t)
	for _, name := range []string{"gpt2", "llama3", "qwen3", "llama2"} {
		t.Run(name, func(t *testing.T) {
			rows := g.Models[name]
			if len(rows) != len(g.Texts) {
				t.Fatalf("golden.json: %d rows for %d texts", len(rows), len(g.Texts))
			}
			for _, special := range []bool{true, false} {
				tok := loadTestHF(t, name, special)
				bad := 0
				for i, text := range g.Texts {
					want := rows[i].Plain
					if special {
						want = rows[i].Special
					}
					got := tok.Encode(text)
					if !slices.Equal(got, want) && bad < 5 {
						bad++
						t.Errorf("special=%v Encode(%q)\n got %v\nwant %v", special, text, got, want)
					}
					// Lossless where the reference's decoding gives the text back.
					if !special && rows[i].Decoded == text {
						if d := tok.Decode(got); d != text {
							t.Errorf("Decode(Encode(%q)) = %q", text, d)
						}
					}
				}
			}
		})
	}
}
