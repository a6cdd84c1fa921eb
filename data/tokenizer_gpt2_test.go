package data

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/tiktoken-go/tokenizer/codec"
)

// readGPT2Cases reads testdata/tokenizer/gpt2_cases.txt.
func readGPT2Cases(t *testing.T) []string {
	t.Helper()
	f, err := os.Open("testdata/tokenizer/gpt2_cases.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var cases []string
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		if s := sc.Text(); s != "" && !strings.HasPrefix(s, "#") {
			u, err := strconv.Unquote(s)
			if err != nil {
				t.Fatalf("gpt2_cases.txt line %d: %v", line, err)
			}
			cases = append(cases, u)
		}
	}
	if len(cases) < 40 {
		t.Fatalf("gpt2_cases.txt has %d cases, want at least 40", len(cases))
	}
	return cases
}

// tiktokenIDs encodes s with tiktoken-go's r50k_base, the oracle.
func tiktokenIDs(t *testing.T, enc *codec.Codec, s string) []int32 {
	t.Helper()
	ids, _, err := enc.Encode(s)
	if err != nil {
		t.Fatalf("tiktoken %q: %v", s, err)
	}
	out := make([]int32, len(ids))
	for i, id := range ids {
		out[i] = int32(id)
	}
	return out
}

// TestGPT2MatchesTiktoken compares the built-in and the file-based GPT-2 tokenizers with
// tiktoken-go id for id, and checks decode(encode(s)) == s.
func TestGPT2MatchesTiktoken(t *testing.T) {
	builtin := BuiltinGPT2()
	dir := t.TempDir()
	vocab, merges := filepath.Join(dir, "vocab.json"), filepath.Join(dir, "merges.txt")
	if err := builtin.WriteFiles(vocab, merges); err != nil {
		t.Fatal(err)
	}
	fromFiles, err := NewTokenizer(TokenizerConfig{Type: "GPT2BPETokenizer", VocabFile: vocab, MergeFile: merges})
	if err != nil {
		t.Fatal(err)
	}
	enc := codec.NewR50kBase()
	for _, s := range readGPT2Cases(t) {
		want := tiktokenIDs(t, enc, s)
		for name, tok := range map[string]Tokenizer{"builtin": builtin, "files": fromFiles} {
			got := tok.Encode(s)
			if !slices.Equal(got, want) {
				t.Errorf("%s: Encode(%q) = %v, tiktoken %v", name, s, got, want)
			}
			if d := tok.Decode(got); d != s {
				t.Errorf("%s: Decode(Encode(%q)) = %q", name, s, d)
			}
		}
	}
}

// TestGPT2KnownValues checks ids and merges everyone can look up: LIBRARIES.md's
// "Hello world", GPT-2's vocabulary size and EOD, and the first lines of GPT-2's
// merges.txt.
func TestGPT2KnownValues(t *testing.T) {
	tok := BuiltinGPT2()
	if got := tok.Encode("Hello world"); !slices.Equal(got, []int32{15496, 995}) {
		t.Errorf("Encode(Hello world) = %v, want [15496 995]", got)
	}
	// DEL is byte 0x7f, the 34th byte outside bytes_to_unicode's 188 printable ones (after
	// 0x00..0x20), so its id is 188 + 33. tiktoken-go drops it, hence this hand check.
	const delID = 188 + 33
	if got := tok.Encode("a\x7f"); !slices.Equal(got, []int32{64, delID}) {
		t.Errorf("Encode(a DEL) = %v, want [64 %d]", got, delID)
	}
	const wantVocab, wantEOD, wantMerges = 50257, 50256, 50000
	if tok.VocabSize() != wantVocab || tok.Special().EOD != wantEOD || tok.NumMerges() != wantMerges {
		t.Errorf("VocabSize %d, EOD %d, merges %d; want %d, %d, %d",
			tok.VocabSize(), tok.Special().EOD, tok.NumMerges(), wantVocab, wantEOD, wantMerges)
	}
	var b strings.Builder
	if err := tok.WriteMerges(&b); err != nil {
		t.Fatal(err)
	}
	wantHead := "#version: 0.2\nĠ t\nĠ a\nh e\ni n\nr e\no n\nĠt he\n"
	if got := b.String()[:len(wantHead)]; got != wantHead {
		t.Errorf("merges.txt starts %q, want %q", got, wantHead)
	}
}

// TestGPT2Split checks the hand-written pre-tokenizer on the cases that need the regex's
// backtracking, with the splits read off the regex by hand.
func TestGPT2Split(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"a   b", []string{"a", "  ", " b"}},
		{"a \n b", []string{"a", " \n", " b"}},
		{"\n\nfoo", []string{"\n", "\n", "foo"}},
		{"end  ", []string{"end", "  "}},
		{"x\ty", []string{"x", "\t", "y"}},
		{"it's 'S", []string{"it", "'s", " '", "S"}},
		{"''s", []string{"''", "s"}},
		{" 123abc", []string{" 123", "abc"}},
		{"?! ok", []string{"?!", " ok"}},
	} {
		var got []string
		gpt2Split(c.in, func(w string) { got = append(got, w) })
		if !slices.Equal(got, c.want) {
			t.Errorf("split %q = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestBPEMergeHeapMatchesSimple checks the O(n log n) merge against GPT-2's loop on random
// words over a small alphabet (many repeated pairs) with the built-in merges.
func TestBPEMergeHeapMatchesSimple(t *testing.T) {
	tok := BuiltinGPT2()
	rng := rand.New(rand.NewPCG(1, 2))
	const alphabet = "aeinst "
	for range 300 {
		n := 1 + rng.IntN(200)
		w := make([]byte, n)
		for i := range w {
			w[i] = alphabet[rng.IntN(len(alphabet))]
		}
		a := make([]int32, n)
		for i := range w {
			a[i] = tok.byteID[w[i]]
		}
		b := slices.Clone(a)
		simple, heap := tok.rules.mergeSimple(a), tok.rules.mergeHeap(b)
		if !slices.Equal(simple, heap) {
			t.Fatalf("%q: simple %v, heap %v", w, simple, heap)
		}
	}
}

// TestGPT2Concurrent encodes from many goroutines at once (run with -race).
func TestGPT2Concurrent(t *testing.T) {
	tok := BuiltinGPT2()
	cases := readGPT2Cases(t)
	want := make([][]int32, len(cases))
	for i, s := range cases {
		want[i] = tok.Encode(s)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range cases {
				j := (i + g) % len(cases)
				if got := tok.Encode(cases[j]); !slices.Equal(got, want[j]) {
					t.Errorf("goroutine %d: Encode(%q) = %v, want %v", g, cases[j], got, want[j])
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestReadGPT2BPEErrors checks that malformed files are reported with what is wrong.
func TestReadGPT2BPEErrors(t *testing.T) {
	var vocab strings.Builder
	vocab.WriteString("{")
	for k, b := range gpt2ByteOrder {
		fmt.Fprintf(&vocab, "%q: %d, ", string(gpt2ByteChars[b]), k)
	}
	full := vocab.String() + `"ab": 256, "<|endoftext|>": 257}`
	for _, c := range []struct {
		name, vocab, merges, want string
	}{
		{"ok", full, "#version: 0.2\na b\n", ""},
		{"no eod", vocab.String() + `"ab": 256}`, "a b\n", "no <|endoftext|>"},
		{"sparse ids", vocab.String() + `"ab": 300, "<|endoftext|>": 257}`, "", "ids must be"},
		{"missing byte", `{"a": 0, "<|endoftext|>": 1}`, "", "no token for the byte"},
		{"three fields", full, "a b c\n", "line 1"},
		{"unknown token", full, "#version: 0.2\na zz\n", "line 2"},
		{"result not in vocab", full, "b a\n", `"ba" is not in the vocabulary`},
		{"bad json", "{", "", "vocab.json"},
	} {
		_, err := ReadGPT2BPE(strings.NewReader(c.vocab), strings.NewReader(c.merges))
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: err = %v, want it to mention %q", c.name, err, c.want)
		}
	}
	if _, err := LoadGPT2BPE("testdata/no-such-vocab.json", "x"); err == nil || !strings.Contains(err.Error(), "no-such-vocab.json") {
		t.Errorf("missing file: err = %v", err)
	}
}

// BenchmarkGPT2Encode measures encoding throughput on the tricky strings, cache warm.
func BenchmarkGPT2Encode(b *testing.B) {
	tok := BuiltinGPT2()
	f, err := os.ReadFile("testdata/tokenizer/gpt2_cases.txt")
	if err != nil {
		b.Fatal(err)
	}
	text := strings.Repeat(string(f), 20)
	ntok := len(tok.Encode(text))
	b.SetBytes(int64(len(text)))
	b.ResetTimer()
	for range b.N {
		tok.Encode(text)
	}
	b.ReportMetric(float64(ntok)*float64(b.N)/b.Elapsed().Seconds(), "tok/s")
}
