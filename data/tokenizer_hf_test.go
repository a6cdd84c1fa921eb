package data

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
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

// readTestHFJSON returns testdata/hf/DIR/tokenizer.json.gz uncompressed.
func readTestHFJSON(t testing.TB, dir string) []byte {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata/hf", dir, "tokenizer.json.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// hfMetaspaceVariant is gen.mjs's metaspace(): the Llama 2 file with a Metaspace
// pre-tokenizer and decoder in place of its normalizer.
func hfMetaspaceVariant(t testing.TB, scheme string, split bool) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(readTestHFJSON(t, "llama2"), &m); err != nil {
		t.Fatal(err)
	}
	ms := map[string]any{"type": "Metaspace", "replacement": "▁", "prepend_scheme": scheme, "split": split}
	m["normalizer"] = nil
	m["pre_tokenizer"] = ms
	m["decoder"] = map[string]any{"type": "Sequence", "decoders": []any{ms, map[string]any{"type": "ByteFallback"}, map[string]any{"type": "Fuse"}}}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// loadTestHF reads the tokenizer golden.json names NAME: testdata/hf/NAME
// (tokenizer.json.gz and tokenizer_config.json), or a Metaspace variant of llama2.
func loadTestHF(t testing.TB, name string, includeSpecial bool) *HFTokenizer {
	t.Helper()
	dir := name
	var tj []byte
	switch name {
	case "metaspace-first":
		dir, tj = "llama2", hfMetaspaceVariant(t, "first", false)
	case "metaspace-always-split":
		dir, tj = "llama2", hfMetaspaceVariant(t, "always", true)
	default:
		tj = readTestHFJSON(t, dir)
	}
	cfg, err := os.ReadFile(filepath.Join("testdata/hf", dir, "tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := ReadHFTokenizer(bytes.NewReader(tj), bytes.NewReader(cfg), includeSpecial)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return tok
}

func TestHFTokenizerGolden(t *testing.T) {
	g := readHFGolden(t)
	for _, name := range []string{"gpt2", "llama3", "qwen3", "llama2", "metaspace-first", "metaspace-always-split"} {
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
