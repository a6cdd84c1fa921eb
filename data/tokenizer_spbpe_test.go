package data

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// spbpeDir holds the SentencePiece BPE models, their training text and golden ids, all
// written by testdata/spbpe/gen.py with Debian's python3-sentencepiece 0.1.97.
const spbpeDir = "testdata/spbpe"

// spbpeModels are the models of golden.json: Llama 2's settings; a custom normalization
// with user-defined and control pieces; whitespace as a suffix without byte fallback; and
// that one with unused pieces.
var spbpeModels = []string{"llama", "custom", "suffix", "unused"}

// spbpeGolden is golden.json: SentencePiece's special ids of each model and, for each
// model and text, the ids it encodes the text to and the text it decodes them to.
type spbpeGolden struct {
	Models map[string]struct {
		VocabSize          int `json:"vocab_size"`
		BOS, EOS, Pad, Unk int32
	} `json:"models"`
	Cases []struct {
		Model   string  `json:"model"`
		Text    string  `json:"text"`
		IDs     []int32 `json:"ids"`
		Decoded string  `json:"decoded"`
	} `json:"cases"`
}

func readSPBPEGolden(t testing.TB) *spbpeGolden {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(spbpeDir, "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g spbpeGolden
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	return &g
}

func loadSPBPE(t testing.TB, name string) *SentencePiece {
	t.Helper()
	tok, err := LoadSentencePiece(filepath.Join(spbpeDir, name+".model"), 0)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestSPBPEGolden compares Encode and Decode with SentencePiece's on every golden text,
// and checks that decoding gives the text back wherever SentencePiece's does.
func TestSPBPEGolden(t *testing.T) {
	g := readSPBPEGolden(t)
	toks := map[string]*SentencePiece{}
	for _, name := range spbpeModels {
		toks[name] = loadSPBPE(t, name)
	}
	const minCases = 4 * 45 // models × texts
	if len(g.Cases) < minCases {
		t.Fatalf("%d golden cases, want ≥ %d", len(g.Cases), minCases)
	}
	for _, c := range g.Cases {
		tok := toks[c.Model]
		got := tok.Encode(c.Text)
		if !slices.Equal(got, c.IDs) {
			t.Errorf("%s: Encode(%q) = %v, SentencePiece %v", c.Model, c.Text, got, c.IDs)
		}
		if d := tok.Decode(got); d != c.Decoded {
			t.Errorf("%s: Decode(Encode(%q)) = %q, SentencePiece %q", c.Model, c.Text, d, c.Decoded)
		}
	}
}

// TestSPBPELossless checks decode(encode(x)) = x for the Llama 2-style model (identity
// normalization, whitespace kept, byte fallback) on the golden texts and the lines of the
// training text.
func TestSPBPELossless(t *testing.T) {
	tok := loadSPBPE(t, "llama")
	train, err := os.ReadFile(filepath.Join(spbpeDir, "train.txt"))
	if err != nil {
		t.Fatal(err)
	}
	texts := strings.Split(string(train), "\n")
	for _, c := range readSPBPEGolden(t).Cases {
		if c.Model == "llama" {
			texts = append(texts, c.Text)
		}
	}
	for _, x := range texts {
		if strings.Contains(x, spaceMarker) {
			continue // "▁" in the text decodes as a space, in SentencePiece too
		}
		if d := tok.Decode(tok.Encode(x)); d != x {
			t.Errorf("Decode(Encode(%q)) = %q", x, d)
		}
	}
}

// TestSPBPEMegatron loads the models by Megatron's tokenizer types and checks the special
// ids against SentencePiece's bos_id, eos_id and pad_id, and what Encode adds: nothing
// (current Megatron), or BOS for Llama2Tokenizer with LegacyTokenizer (Megatron's
// legacy _Llama2Tokenizer.tokenize(s, bos=True, eos=False)).
func TestSPBPEMegatron(t *testing.T) {
	g := readSPBPEGolden(t)
	for _, c := range []struct {
		typ    string
		legacy bool
		bos    bool // Encode starts with BOS
	}{
		{"Llama2Tokenizer", false, false},
		{"Llama2Tokenizer", true, true},
		{"GPTSentencePieceTokenizer", false, false},
		{"GPTSentencePieceTokenizer", true, false},
		{"SentencePieceTokenizer", false, false},
	} {
		for _, name := range []string{"llama", "custom"} {
			tok, err := NewTokenizer(TokenizerConfig{Type: c.typ, TokenizerModel: filepath.Join(spbpeDir, name+".model"), LegacyTokenizer: c.legacy})
			if err != nil {
				t.Fatal(err)
			}
			m := g.Models[name]
			s := tok.Special()
			if tok.VocabSize() != m.VocabSize || s.BOS != m.BOS || s.EOS != m.EOS || s.EOD != m.EOS || s.Pad != m.Pad {
				t.Errorf("%s %s: VocabSize %d, Special %+v; SentencePiece: %d, bos %d, eos %d, pad %d",
					c.typ, name, tok.VocabSize(), s, m.VocabSize, m.BOS, m.EOS, m.Pad)
			}
			if c.typ != "SentencePieceTokenizer" && (s.CLS != -1 || s.SEP != -1 || s.Mask != -1 || len(s.Sentinels) != 0) {
				t.Errorf("%s %s: Special %+v, want no CLS, SEP, mask or sentinels", c.typ, name, s)
			}
			for _, gc := range g.Cases {
				if gc.Model != name {
					continue
				}
				want := gc.IDs
				if c.bos {
					want = append([]int32{m.BOS}, want...)
				}
				if got := tok.Encode(gc.Text); !slices.Equal(got, want) {
					t.Errorf("%s legacy=%v %s: Encode(%q) = %v, want %v", c.typ, c.legacy, name, gc.Text, got, want)
				}
			}
		}
	}
	if _, err := NewTokenizer(TokenizerConfig{Type: "Llama2Tokenizer"}); err == nil || !strings.Contains(err.Error(), "--tokenizer-model") {
		t.Errorf("no model file: err = %v, want it to ask for --tokenizer-model", err)
	}
	if _, err := LoadGPTSentencePiece(filepath.Join(spbpeDir, "llama.mode"), false); err == nil || !strings.Contains(err.Error(), "llama.mode") {
		t.Errorf("missing file: err = %v, want it to name the file", err)
	}
}

// BenchmarkSPBPEEncode encodes the same text with the GPT-2 BPE and with the SentencePiece
// BPE models (issue 20 asks for ≥ 0.5× the GPT-2 BPE's MB/s): BenchmarkGPT2Encode's input
// and the SentencePiece training text, caches warm.
func BenchmarkSPBPEEncode(b *testing.B) {
	cases, err := os.ReadFile("testdata/tokenizer/gpt2_cases.txt")
	if err != nil {
		b.Fatal(err)
	}
	train, err := os.ReadFile(filepath.Join(spbpeDir, "train.txt"))
	if err != nil {
		b.Fatal(err)
	}
	toks := []struct {
		name string
		tok  Tokenizer
	}{{"gpt2", BuiltinGPT2()}}
	for _, name := range []string{"llama", "custom", "suffix"} {
		toks = append(toks, struct {
			name string
			tok  Tokenizer
		}{"spbpe-" + name, loadSPBPE(b, name)})
	}
	for _, in := range []struct{ name, text string }{
		{"gpt2_cases", strings.Repeat(string(cases), 20)},
		{"train", strings.Repeat(string(train), 20)},
	} {
		for _, tk := range toks {
			b.Run(in.name+"/"+tk.name, func(b *testing.B) {
				ntok := len(tk.tok.Encode(in.text))
				b.SetBytes(int64(len(in.text)))
				for b.Loop() {
					tk.tok.Encode(in.text)
				}
				b.ReportMetric(float64(ntok)*float64(b.N)/b.Elapsed().Seconds(), "tok/s")
			})
		}
	}
}

// spbpeVariant loads a model with its BPE merging forced: whole texts (no word split, no
// cache), and mergeSimple up to simpleMax symbols, mergeHeap beyond.
func spbpeVariant(t testing.TB, name string, simpleMax int) *SentencePiece {
	t.Helper()
	tok := loadSPBPE(t, name)
	b := tok.model.(*spBPE)
	b.split, b.simpleMax = "", simpleMax
	return tok
}

// TestSPBPEMergePaths checks that the fast paths give SentencePiece's result beyond the
// golden texts: word-by-word merging with the cache, mergeSimple and mergeHeap (which is
// bpe_model.cc's loop) agree on the training text, its lines, and random mixtures of its
// characters and whitespace.
func TestSPBPEMergePaths(t *testing.T) {
	train, err := os.ReadFile(filepath.Join(spbpeDir, "train.txt"))
	if err != nil {
		t.Fatal(err)
	}
	texts := append(strings.Split(string(train), "\n"), string(train))
	chars := []rune(string(train) + "    ▁▁\t\n\u00a0龘😀")
	rng := rand.New(rand.NewPCG(20, 1))
	const randomTexts = 200
	for range randomTexts {
		r := make([]rune, 1+rng.IntN(80))
		for i := range r {
			r[i] = chars[rng.IntN(len(chars))]
		}
		texts = append(texts, string(r))
	}
	// llama.model's whitespace-only pieces ("▁▁▁▁") do not prevent splitting; suffix.model's
	// pieces span whitespace and unused.model resegments across words.
	wantSplit := map[string]string{"llama": spaceMarker, "custom": spaceMarker, "suffix": "", "unused": ""}
	for _, name := range spbpeModels {
		fast := loadSPBPE(t, name)
		if got := fast.model.(*spBPE).split; got != wantSplit[name] {
			t.Errorf("%s: splits before %q, want %q", name, got, wantSplit[name])
		}
		heap := spbpeVariant(t, name, 0)
		simple := spbpeVariant(t, name, math.MaxInt)
		for _, x := range texts {
			want := heap.Encode(x)
			if got := fast.Encode(x); !slices.Equal(got, want) {
				t.Errorf("%s: Encode(%q) = %v, whole-text mergeHeap %v", name, x, got, want)
			}
			if got := simple.Encode(x); !slices.Equal(got, want) {
				t.Errorf("%s: mergeSimple(%q) = %v, mergeHeap %v", name, x, got, want)
			}
		}
	}
}

// ExampleLoadGPTSentencePiece encodes with a SentencePiece BPE model as Megatron's
// Llama2Tokenizer does, with and without the legacy BOS. The ids are python3-sentencepiece's.
func ExampleLoadGPTSentencePiece() {
	for _, legacy := range []bool{false, true} {
		tok, err := LoadGPTSentencePiece("testdata/spbpe/llama.model", legacy)
		if err != nil {
			fmt.Println(err)
			return
		}
		ids := tok.Encode("Hello world")
		fmt.Println(ids, tok.Decode(ids), tok.Special().BOS)
	}
	// Output:
	// [504 592 279 499 418 496] Hello world 1
	// [1 504 592 279 499 418 496] Hello world 1
}
