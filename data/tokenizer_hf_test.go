package data

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
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

// hfAddedVariant is gen.mjs's addedTokens(): the GPT-2 file with added tokens that have
// lstrip, rstrip and normalized set.
func hfAddedVariant(t testing.TB) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(readTestHFJSON(t, "gpt2"), &m); err != nil {
		t.Fatal(err)
	}
	add := func(id int, content string, lstrip, rstrip, normalized, special bool) {
		m["added_tokens"] = append(m["added_tokens"].([]any), map[string]any{"id": id, "content": content,
			"single_word": false, "lstrip": lstrip, "rstrip": rstrip, "normalized": normalized, "special": special})
	}
	add(50257, "<mask>", true, false, false, true)
	add(50258, "<rs>", false, true, false, true)
	add(50259, "[both]", true, true, true, false)
	add(50260, "<|endoftext|>x", false, false, false, true)
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// hfPostVariant is gen.mjs's robertaPost() and bertPost(): the file in dir with post
// as its post-processor.
func hfPostVariant(t testing.TB, dir string, post map[string]any) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(readTestHFJSON(t, dir), &m); err != nil {
		t.Fatal(err)
	}
	m["post_processor"] = post
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
	case "gpt2-added":
		dir, tj = "gpt2", hfAddedVariant(t)
	case "gpt2-roberta":
		dir, tj = "gpt2", hfPostVariant(t, "gpt2", map[string]any{"type": "RobertaProcessing",
			"sep": []any{"<|endoftext|>", 50256}, "cls": []any{"<|endoftext|>", 50256}, "trim_offsets": true, "add_prefix_space": false})
	case "wordpiece-bert":
		dir, tj = "wordpiece", hfPostVariant(t, "wordpiece", map[string]any{"type": "BertProcessing",
			"sep": []any{"[SEP]", 3}, "cls": []any{"[CLS]", 2}})
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

// TestHFTokenizerGolden compares Encode with the ids of @huggingface/tokenizers, with and
// without the post-processor's special tokens, checks Decode(Encode(x)) = x where the
// reference gives x back, and checks the sizes and special ids tokenizer.json and
// tokenizer_config.json give.
func TestHFTokenizerGolden(t *testing.T) {
	g := readHFGolden(t)
	for _, c := range []struct {
		name          string
		vocab         int
		bos, eos, pad int32
	}{
		{"gpt2", 50257, 50256, 50256, -1},
		{"llama3", 128256, 128000, 128009, -1},
		{"qwen3", 151669, -1, 151645, 151643},
		{"llama2", 32000, 1, 2, -1},
		{"gpt2-added", 50261, 50256, 50256, -1},
		{"wordpiece", 31736, -1, -1, 0},
		{"wordpiece-bert", 31736, -1, -1, 0},
		{"gpt2-roberta", 50257, 50256, 50256, -1},
		{"metaspace-first", 32000, 1, 2, -1},
		{"metaspace-always-split", 32000, 1, 2, -1},
	} {
		t.Run(c.name, func(t *testing.T) {
			rows := g.Models[c.name]
			if len(rows) != len(g.Texts) {
				t.Fatalf("golden.json: %d rows for %d texts", len(rows), len(g.Texts))
			}
			tok := loadTestHF(t, c.name, true)
			s := tok.Special()
			if tok.VocabSize() != c.vocab || s.BOS != c.bos || s.EOS != c.eos || s.EOD != c.eos || s.Pad != c.pad {
				t.Errorf("VocabSize %d, Special %+v; want %d, BOS %d, EOS = EOD %d, pad %d", tok.VocabSize(), s, c.vocab, c.bos, c.eos, c.pad)
			}
			for _, special := range []bool{true, false} {
				tok.withSpec = special // as ReadHFTokenizer's includeSpecial, without reading the file again
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
					// Lossless where the reference's decoding gives the text back; WordPiece
					// decodes as the reference does.
					if !special && (rows[i].Decoded == text || strings.HasPrefix(c.name, "wordpiece")) {
						if d := tok.Decode(got); d != rows[i].Decoded {
							t.Errorf("Decode(Encode(%q)) = %q, want %q", text, d, rows[i].Decoded)
						}
					}
				}
			}
		})
	}
}

// TestHFTokenizerNewTokenizer loads the files by --tokenizer-type name (reading
// tokenizer.json.gz) and checks the sizes and special ids tokenizer.json and
// tokenizer_config.json give.
func TestHFTokenizerNewTokenizer(t *testing.T) {
	cases := []struct {
		dir            string
		vocab          int
		bos, eos, pad  int32
		withBOS, noBOS []int32 // Encode("Hello world") with and without special tokens
	}{
		{"gpt2", 50257, 50256, 50256, -1, []int32{15496, 995}, []int32{15496, 995}},
		{"llama2", 32000, 1, 2, -1, []int32{1, 22557, 1526}, []int32{22557, 1526}},
	}
	for _, c := range cases {
		for _, noSpecial := range []bool{false, true} {
			tok, err := NewTokenizer(TokenizerConfig{Type: "HuggingFaceTokenizer", TokenizerModel: filepath.Join("testdata/hf", c.dir), HFNoSpecialTokens: noSpecial})
			if err != nil {
				t.Fatal(err)
			}
			s := tok.Special()
			if tok.VocabSize() != c.vocab || s.BOS != c.bos || s.EOS != c.eos || s.EOD != c.eos || s.Pad != c.pad {
				t.Errorf("%s: VocabSize %d, Special %+v; want %d, BOS %d, EOS = EOD %d, pad %d", c.dir, tok.VocabSize(), s, c.vocab, c.bos, c.eos, c.pad)
			}
			want := c.withBOS
			if noSpecial {
				want = c.noBOS
			}
			if got := tok.Encode("Hello world"); !slices.Equal(got, want) {
				t.Errorf("%s no-special=%v: Encode = %v, want %v", c.dir, noSpecial, got, want)
			}
		}
	}
}

// FuzzHFByteLevelRoundTrip checks that Llama 3's tokenizer (byte-level, no normalizer)
// gives any text back, invalid UTF-8 included: its pre-tokenizer's words cover the text.
func FuzzHFByteLevelRoundTrip(f *testing.F) {
	for _, s := range readHFGolden(f).Texts {
		f.Add(s)
	}
	tok := loadTestHF(f, "llama3", false)
	f.Fuzz(func(t *testing.T, text string) {
		if got := tok.Decode(tok.Encode(text)); got != text {
			t.Errorf("Decode(Encode(%q)) = %q", text, got)
		}
	})
}

// BenchmarkHFEncode encodes BenchmarkGPT2Encode's input with each tokenizer.json.
func BenchmarkHFEncode(b *testing.B) {
	f, err := os.ReadFile("testdata/tokenizer/gpt2_cases.txt")
	if err != nil {
		b.Fatal(err)
	}
	text := strings.Repeat(string(f), 20)
	for _, name := range []string{"gpt2", "llama3", "qwen3", "llama2"} {
		tok := loadTestHF(b, name, true)
		b.Run(name, func(b *testing.B) {
			tok.Encode(text)
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				tok.Encode(text)
			}
		})
	}
}
