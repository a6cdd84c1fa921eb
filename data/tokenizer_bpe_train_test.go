package data

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// gpt2ByteIDOf returns the id GPT-2's byte order gives byte b (the trainer's byte ids).
func gpt2ByteIDOf(b byte) int32 { return int32(slices.Index(gpt2ByteOrder[:], b)) }

// TestTrainBPEByHand trains on "ab ab ab cd", whose merges follow from the definition:
// words "ab" ×1, " ab" ×2, " cd" ×1 (space is 'Ġ'). Counts: (a,b) 3 → merge "ab"; then
// (Ġ,ab) 2 → "Ġab"; then (Ġ,c) and (c,d) tie at 1 and the smaller left id wins: c (byte
// 0x63, id 66) < Ġ (byte 0x20, id 220) → "cd"; then (Ġ,cd) → "Ġcd".
func TestTrainBPEByHand(t *testing.T) {
	tok, err := TrainBPE(strings.NewReader("ab ab ab cd"), 256+4+1)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := tok.WriteMerges(&b); err != nil {
		t.Fatal(err)
	}
	const wantMerges = "#version: 0.2\na b\nĠ ab\nc d\nĠ cd\n"
	if b.String() != wantMerges {
		t.Errorf("merges.txt = %q, want %q", b.String(), wantMerges)
	}
	if c, sp := gpt2ByteIDOf('c'), gpt2ByteIDOf(' '); c != 66 || sp != 220 {
		t.Errorf("byte ids c %d, space %d; want 66, 220", c, sp)
	}
	const ab, spAB, cd, spCD, eod = 256, 257, 258, 259, 260
	if got, want := tok.Encode("ab cd ab"), []int32{ab, spCD, spAB}; !slices.Equal(got, want) {
		t.Errorf("Encode = %v, want %v", got, want)
	}
	if got := tok.Encode("dc"); !slices.Equal(got, []int32{gpt2ByteIDOf('d'), gpt2ByteIDOf('c')}) {
		t.Errorf("Encode(dc) = %v, want the two byte ids", got)
	}
	if tok.VocabSize() != eod+1 || tok.Special().EOD != eod {
		t.Errorf("VocabSize %d EOD %d, want %d %d", tok.VocabSize(), tok.Special().EOD, eod+1, eod)
	}
}

// TestTrainBPERoundTrip trains on text, writes the files, reads them back as a
// GPT2BPETokenizer, and checks that both encode alike and decode to the text.
func TestTrainBPERoundTrip(t *testing.T) {
	var corpus strings.Builder
	for i := range 200 {
		fmt.Fprintf(&corpus, "func f%d(x int) int {\n\treturn x*%d + %d // naïve 😀\n}\n\n", i, i, i*i)
	}
	tr := NewBPETrainer()
	tr.Add(corpus.String())
	const vocabSize = 600
	tok, err := tr.Train(vocabSize)
	if err != nil {
		t.Fatal(err)
	}
	if tok.VocabSize() != vocabSize {
		t.Fatalf("VocabSize %d, want %d", tok.VocabSize(), vocabSize)
	}
	dir := t.TempDir()
	vf, mf := filepath.Join(dir, "vocab.json"), filepath.Join(dir, "merges.txt")
	if err := tok.WriteFiles(vf, mf); err != nil {
		t.Fatal(err)
	}
	loaded, err := NewTokenizer(TokenizerConfig{Type: "GPT2BPETokenizer", VocabFile: vf, MergeFile: mf})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{corpus.String()[:500], "unseen text: Grüße, 日本\n\t\tx"} {
		a, b := tok.Encode(s), loaded.Encode(s)
		if !slices.Equal(a, b) {
			t.Errorf("trained %v, loaded %v", a, b)
		}
		if d := loaded.Decode(b); d != s {
			t.Errorf("Decode(Encode(%q)) = %q", s, d)
		}
	}
	if got, want := loaded.Special().EOD, int32(vocabSize-1); got != want {
		t.Errorf("EOD %d, want %d", got, want)
	}
	again, err := tr.Train(vocabSize)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(again.merges, tok.merges) {
		t.Error("training twice gave different merges")
	}
}

// TestTrainBPEStopsEarly: a corpus with few pairs cannot fill a large vocabulary.
func TestTrainBPEStopsEarly(t *testing.T) {
	tok, err := TrainBPE(strings.NewReader("abc"), 1000)
	if err != nil {
		t.Fatal(err)
	}
	// "abc" has pairs (a,b), (b,c): two merges, "ab" then "abc".
	if tok.VocabSize() != 256+2+1 {
		t.Errorf("VocabSize %d, want %d", tok.VocabSize(), 256+2+1)
	}
	if _, err := TrainBPE(strings.NewReader("x"), 256); err == nil {
		t.Error("vocabulary size 256 accepted")
	}
}

// TestGoSourceBPE checks the shipped vocabulary: its size, EOD, round trips, and that it
// compresses Go code (the data it was trained on is the Go standard library).
func TestGoSourceBPE(t *testing.T) {
	tok, err := NewTokenizer(TokenizerConfig{Type: "gosource-bpe"})
	if err != nil {
		t.Fatal(err)
	}
	const wantVocab = 8192
	if tok.VocabSize() != wantVocab || tok.Special().EOD != wantVocab-1 {
		t.Errorf("VocabSize %d EOD %d, want %d %d", tok.VocabSize(), tok.Special().EOD, wantVocab, wantVocab-1)
	}
	code := "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfor i := 0; i < 10; i++ {\n\t\tfmt.Println(i)\n\t}\n}\n"
	ids := tok.Encode(code)
	if d := tok.Decode(ids); d != code {
		t.Errorf("round trip: %q", d)
	}
	// Bytes alone give 1 byte a token; the vocabulary gives 2.98 on its training corpus
	// (README.md) and 2.17 on this short snippet.
	const minBytesPerToken = 2
	if r := float64(len(code)) / float64(len(ids)); r < minBytesPerToken {
		t.Errorf("%.2f bytes per token on Go code, want ≥ %v", r, minBytesPerToken)
	}
}
