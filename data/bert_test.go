package data

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// Token ids of the synthetic BERT and T5 vocabulary.
const (
	testPad, testCLS, testSEP, testMask = 0, 1, 2, 3
	testFirstWord                       = 10   // ordinary tokens are [10, testVocab)
	testFirstContinuation               = 800  // ids ≥ 800 continue the word before them
	testVocab                           = 1000 // ids ≥ 900 are T5 sentinels, never in text
)

func testIsContinuation(id int32) bool { return id >= testFirstContinuation }

// sentenceSource returns docs documents of 1 to maxSent sentences of 1 to 30 tokens
// drawn from [testFirstWord, 900).
func sentenceSource(seed uint64, docs, maxSent int) *MemorySource {
	r := rand.New(rand.NewPCG(seed, 0))
	src := &MemorySource{Docs: []int{0}}
	for range docs {
		for range 1 + r.IntN(maxSent) {
			s := make([]int32, 1+r.IntN(30))
			for i := range s {
				s[i] = int32(testFirstWord + r.IntN(900-testFirstWord))
			}
			src.Seqs = append(src.Seqs, s)
		}
		src.Docs = append(src.Docs, len(src.Seqs))
	}
	return src
}

func testBERTConfig() BERTConfig {
	sp := NoSpecial()
	sp.Pad, sp.CLS, sp.SEP, sp.Mask = testPad, testCLS, testSEP, testMask
	return BERTConfig{SeqLen: 64, Seed: 5, Split: "1", ShortSeqProb: 0.1, IsContinuation: testIsContinuation, Special: sp, VocabSize: testVocab}
}

// BERT masking statistics over many samples: about 15% of tokens masked; of those 80%
// [MASK], 10% random, 10% unchanged; never [CLS] or [SEP]; whole words together.
func TestBERTMaskingStatistics(t *testing.T) {
	src := sentenceSource(1, 400, 8)
	ds, err := NewBERTDataset(context.Background(), src, SplitTrain, 3000, testBERTConfig())
	if err != nil {
		t.Fatal(err)
	}
	if ds.Len() < 3000 {
		t.Fatalf("Len = %d, want ≥ 3000", ds.Len())
	}
	var real, masked, budget, toMask, unchanged, random, swapped int
	for i := range ds.Len() {
		s := ds.Sample(i)
		n := checkBERTLayout(t, s, 64)
		real += n
		budget += numToPredict(n, 0.15)
		m := 0
		swapped += int(s.IsRandom)
		for j := range n {
			if s.Labels[j] < 0 {
				continue
			}
			masked++
			if m++; m > numToPredict(n, 0.15) {
				t.Fatalf("sample %d of %d tokens: more than round(0.15·n) masked", i, n)
			}
			switch s.Tokens[j] {
			case testMask:
				toMask++
			case s.Labels[j]:
				unchanged++
			default:
				random++
			}
		}
	}
	frac := func(k, n int) float64 { return float64(k) / float64(n) }
	// max(1, round(0.15·n)) per sample, less where whole words do not fit the budget
	if f := frac(masked, real); f < 0.14 || f > 0.16 || frac(masked, budget) < 0.97 {
		t.Errorf("masked %.4f of the tokens and %.4f of the budget, want 0.15 ± 0.01 and ≥ 0.97", f, frac(masked, budget))
	}
	// Tolerances are about 5 standard deviations: ~20k masked tokens for the 80/10/10
	// split, ~3000 samples for the swap. A random replacement equals the original with
	// probability 1/1000.
	for name, c := range map[string]struct {
		got, want, tol float64
	}{
		"[MASK]":    {frac(toMask, masked), 0.8, 0.015},
		"unchanged": {frac(unchanged, masked), 0.1 + 0.1/testVocab, 0.011},
		"random":    {frac(random, masked), 0.1 - 0.1/testVocab, 0.011},
		"swapped":   {frac(swapped, ds.Len()), 0.5, 0.045},
	} {
		t.Logf("%s: %.4f, want %.4f ± %.3f", name, c.got, c.want, c.tol)
		if math.Abs(c.got-c.want) > c.tol {
			t.Errorf("%s: %.4f, want %.4f ± %.3f", name, c.got, c.want, c.tol)
		}
	}
	t.Logf("masked %d of %d tokens (%.4f), budget %d", masked, real, frac(masked, real), budget)
}

// checkBERTLayout checks one sample's structure and returns its number of real tokens.
func checkBERTLayout(t *testing.T, s BERTSample, T int) int {
	t.Helper()
	if len(s.Tokens) != T || len(s.TokenTypes) != T || len(s.Labels) != T || len(s.LossMask) != T || len(s.PaddingMask) != T {
		t.Fatalf("sample lengths %d %d %d %d %d, want %d", len(s.Tokens), len(s.TokenTypes), len(s.Labels), len(s.LossMask), len(s.PaddingMask), T)
	}
	n := 0
	for n < T && s.PaddingMask[n] == 1 {
		n++
	}
	sep1 := 0
	for j := range n {
		if s.TokenTypes[j] == 0 {
			sep1 = j
		}
	}
	if s.Tokens[0] != testCLS || s.Tokens[sep1] != testSEP || s.Tokens[n-1] != testSEP || s.TokenTypes[n-1] != 1 {
		t.Fatalf("sample is not [CLS] A [SEP] B [SEP]: tokens %v types %v", s.Tokens[:n], s.TokenTypes[:n])
	}
	for _, j := range []int{0, sep1, n - 1} {
		if s.Labels[j] != -1 || s.LossMask[j] != 0 {
			t.Fatalf("special token at %d masked", j)
		}
	}
	for j := range T {
		if (s.Labels[j] >= 0) != (s.LossMask[j] == 1) {
			t.Fatalf("position %d: label %d, loss mask %v", j, s.Labels[j], s.LossMask[j])
		}
		if j >= n && (s.Tokens[j] != testPad || s.PaddingMask[j] != 0 || s.TokenTypes[j] != 0 || s.Labels[j] != -1) {
			t.Fatalf("padding position %d is not padding", j)
		}
		if j < sep1 && s.TokenTypes[j] != 0 || j > sep1 && j < n && s.TokenTypes[j] != 1 {
			t.Fatalf("token types %v", s.TokenTypes[:n])
		}
	}
	// whole words: every word of the original text is masked entirely or not at all
	orig := slices.Clone(s.Tokens[:n])
	for j := range n {
		if s.Labels[j] >= 0 {
			orig[j] = s.Labels[j]
		}
	}
	for _, w := range wholeWords(orig, func(j int) bool { return j != 0 && j != sep1 && j != n-1 }, testIsContinuation) {
		m := s.Labels[w[0]] >= 0
		for _, j := range w {
			if (s.Labels[j] >= 0) != m {
				t.Fatalf("word at %v partly masked: labels %v", w, s.Labels[w[0]:w[len(w)-1]+1])
			}
		}
	}
	return n
}

// Segments come from the sample's sentences in order (A then B), or swapped when
// IsRandom; checked on samples that needed no truncation.
func TestBERTSentenceOrder(t *testing.T) {
	src := sentenceSource(2, 300, 6)
	cfg := testBERTConfig()
	cfg.SeqLen = 512
	ds, err := NewBERTDataset(context.Background(), src, SplitTrain, 0, cfg)
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for i := range ds.Len() {
		s := ds.Sample(i)
		start, end := int(ds.rows[3*i]), int(ds.rows[3*i+1])
		var text []int32
		for k := start; k < end; k++ {
			text = append(text, src.Seqs[k]...)
		}
		n := checkBERTLayout(t, s, cfg.SeqLen)
		if n-3 != len(text) {
			continue // truncated
		}
		orig := slices.Clone(s.Tokens[:n])
		for j := range n {
			if s.Labels[j] >= 0 {
				orig[j] = s.Labels[j]
			}
		}
		sep1 := slices.Index(orig[1:], testSEP) + 1
		a, b := orig[1:sep1], orig[sep1+1:n-1]
		got := append(slices.Clone(a), b...)
		if s.IsRandom == 1 {
			got = append(slices.Clone(b), a...)
		}
		if !slices.Equal(got, text) || len(a) == 0 || len(b) == 0 {
			t.Fatalf("sample %d (swapped %d): A %v B %v from sentences %v", i, s.IsRandom, a, b, text)
		}
		checked++
	}
	if checked < ds.Len()/2 {
		t.Fatalf("only %d of %d samples were untruncated", checked, ds.Len())
	}
}

// A sample depends only on (seed, index): two datasets built apart agree, and a
// different seed changes the masking.
func TestBERTSampleDeterminism(t *testing.T) {
	src := sentenceSource(3, 50, 6)
	cfg := testBERTConfig()
	a, err := NewBERTDataset(context.Background(), src, SplitTrain, 0, cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewBERTDataset(context.Background(), src, SplitTrain, 0, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{a.Len() - 1, 0, a.Len() / 2} {
		x, y := a.Sample(i), b.Sample(i)
		if !slices.Equal(x.Tokens, y.Tokens) || !slices.Equal(x.Labels, y.Labels) || x.IsRandom != y.IsRandom {
			t.Fatalf("sample %d differs between two identical datasets", i)
		}
	}
}

func TestBERTConfigValidate(t *testing.T) {
	for name, mod := range map[string]func(*BERTConfig){
		"short":      func(c *BERTConfig) { c.SeqLen = 4 },
		"no mask id": func(c *BERTConfig) { c.Special.Mask = -1 },
		"no vocab":   func(c *BERTConfig) { c.VocabSize = 0 },
		"prob":       func(c *BERTConfig) { c.MaskProb = 2 },
	} {
		cfg := testBERTConfig()
		mod(&cfg)
		if cfg.Validate() == nil {
			t.Errorf("%s: Validate accepted", name)
		}
	}
	// one sentence per document: no pairs
	src := &MemorySource{Seqs: [][]int32{{10, 11}, {12}}}
	if _, err := NewBERTDataset(context.Background(), src, SplitTrain, 0, testBERTConfig()); err == nil {
		t.Error("a BERT dataset without two-sentence documents was built")
	}
}

// The sample mapping goes through the same index cache as the GPT indices.
func TestBERTMappingCache(t *testing.T) {
	cfg := testBERTConfig()
	cfg.Name = "memory:sentences"
	cfg.Cache = IndexCache{Dir: t.TempDir(), Builder: true}
	src := sentenceSource(6, 50, 6)
	a, err := NewBERTDataset(context.Background(), src, SplitTrain, 0, cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Cache.Builder = false // waits for a file that is already there
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	b, err := NewBERTDataset(ctx, src, SplitTrain, 0, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a.rows, b.rows) {
		t.Fatal("cached mapping differs from the built one")
	}
}
