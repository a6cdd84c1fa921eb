package data

import (
	"context"
	"slices"
	"strings"
	"testing"
)

func testT5Config() T5Config {
	sp := NoSpecial()
	sp.Pad, sp.BOS, sp.EOS = testPad, testCLS, testSEP
	for i := range 100 {
		sp.Sentinels = append(sp.Sentinels, int32(900+i))
	}
	return T5Config{EncSeqLen: 128, DecSeqLen: 48, Seed: 9, Split: "1", ShortSeqProb: 0.1, IsContinuation: testIsContinuation, Special: sp}
}

// Putting each decoder span back in place of its sentinel reproduces the original text;
// sentinels are used in order; DecInput is [BOS] + Labels shifted; spans are whole words.
func TestT5SentinelStructure(t *testing.T) {
	src := sentenceSource(4, 300, 6)
	cfg := testT5Config()
	ds, err := NewT5Dataset(context.Background(), src, SplitTrain, 2000, cfg)
	if err != nil {
		t.Fatal(err)
	}
	isSentinel := func(id int32) bool { return id >= 900 }
	var total, masked int
	for i := range ds.Len() {
		s := ds.Sample(i)
		orig := ds.Source(i)
		if len(s.EncTokens) != cfg.EncSeqLen || len(s.DecInput) != cfg.DecSeqLen || len(s.Labels) != cfg.DecSeqLen ||
			len(s.LossMask) != cfg.DecSeqLen || len(s.EncPaddingMask) != cfg.EncSeqLen || len(s.DecPaddingMask) != cfg.DecSeqLen {
			t.Fatalf("sample %d: wrong lengths", i)
		}
		ne := count1(s.EncPaddingMask)
		nd := count1(s.DecPaddingMask)
		enc, dec, labels := s.EncTokens[:ne], s.DecInput[:nd], s.Labels[:nd]
		if dec[0] != cfg.Special.BOS || labels[nd-1] != cfg.Special.EOS || !slices.Equal(dec[1:], labels[:nd-1]) {
			t.Fatalf("sample %d: decoder %v, labels %v", i, dec, labels)
		}
		for j := nd; j < cfg.DecSeqLen; j++ {
			if s.DecInput[j] != testPad || s.Labels[j] != -1 || s.LossMask[j] != 0 {
				t.Fatalf("sample %d: decoder padding at %d", i, j)
			}
		}
		for j := ne; j < cfg.EncSeqLen; j++ {
			if s.EncTokens[j] != testPad {
				t.Fatalf("sample %d: encoder padding at %d", i, j)
			}
		}
		// split labels (without EOS) into sentinel-led spans
		spans := map[int32][]int32{}
		var order []int32
		for _, id := range labels[:nd-1] {
			if isSentinel(id) {
				order = append(order, id)
				continue
			}
			if len(order) == 0 {
				t.Fatalf("sample %d: labels %v do not start with a sentinel", i, labels)
			}
			spans[order[len(order)-1]] = append(spans[order[len(order)-1]], id)
		}
		if !slices.Equal(order, cfg.Special.Sentinels[:len(order)]) {
			t.Fatalf("sample %d: sentinels %v out of order", i, order)
		}
		var rebuilt []int32
		var maskedPos []bool
		for _, id := range enc {
			if isSentinel(id) {
				if len(spans[id]) == 0 {
					t.Fatalf("sample %d: sentinel %d has an empty span", i, id)
				}
				rebuilt = append(rebuilt, spans[id]...)
				for range spans[id] {
					maskedPos = append(maskedPos, true)
				}
				continue
			}
			rebuilt = append(rebuilt, id)
			maskedPos = append(maskedPos, false)
		}
		if !slices.Equal(rebuilt, orig) {
			t.Fatalf("sample %d: spans put back give %v, want %v", i, rebuilt, orig)
		}
		maskedTokens := nd - 1 - len(order)
		if slices.Contains(enc, cfg.Special.EOS) || len(enc) != len(orig)-maskedTokens+len(order) {
			t.Fatalf("sample %d: encoder length %d, %d spans, original %d", i, len(enc), len(order), len(orig))
		}
		for _, w := range wholeWords(orig, func(int) bool { return true }, testIsContinuation) {
			for _, j := range w {
				if maskedPos[j] != maskedPos[w[0]] {
					t.Fatalf("sample %d: word %v partly masked", i, w)
				}
			}
		}
		total += len(orig)
		masked += maskedTokens
	}
	t.Logf("masked %d of %d tokens (%.4f)", masked, total, float64(masked)/float64(total))
	// The decoder room (48) caps long samples' spans below 15%.
	if f := float64(masked) / float64(total); f < 0.10 || f > 0.16 {
		t.Errorf("masked %.4f of the tokens, want about 0.15", f)
	}
}

func count1(m []int32) int {
	n := 0
	for n < len(m) && m[n] == 1 {
		n++
	}
	return n
}

// With few sentinels, masking stops at one span per sentinel.
func TestT5FewSentinels(t *testing.T) {
	cfg := testT5Config()
	cfg.Special.Sentinels = cfg.Special.Sentinels[:2]
	cfg.DecSeqLen = 128
	ds, err := NewT5Dataset(context.Background(), sentenceSource(5, 50, 6), SplitTrain, 0, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := range ds.Len() {
		s := ds.Sample(i)
		n := 0
		for _, id := range s.EncTokens {
			if id >= 900 {
				n++
			}
		}
		if n > 2 || n == 0 {
			t.Fatalf("sample %d has %d sentinels, want 1 or 2", i, n)
		}
	}
}

// Without a BOS id (T5's SentencePiece vocabularies) the padding id starts the decoder;
// the samples are otherwise those with a BOS. EOS and Pad remain required.
func TestT5DecoderStartWithoutBOS(t *testing.T) {
	src := sentenceSource(4, 60, 6)
	withBOS := testT5Config()
	noBOS := withBOS
	noBOS.Special.BOS = -1
	a, err := NewT5Dataset(context.Background(), src, SplitTrain, 0, withBOS)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewT5Dataset(context.Background(), src, SplitTrain, 0, noBOS)
	if err != nil {
		t.Fatal(err)
	}
	if a.DecoderStart() != withBOS.Special.BOS || b.DecoderStart() != testPad {
		t.Fatalf("decoder starts %d and %d, want BOS %d and pad %d", a.DecoderStart(), b.DecoderStart(), withBOS.Special.BOS, testPad)
	}
	for i := range a.Len() {
		sa, sb := a.Sample(i), b.Sample(i)
		if sb.DecInput[0] != testPad || !slices.Equal(sa.DecInput[1:], sb.DecInput[1:]) || !slices.Equal(sa.Labels, sb.Labels) ||
			!slices.Equal(sa.EncTokens, sb.EncTokens) {
			t.Fatalf("sample %d: without BOS %v, with %v", i, sb.DecInput, sa.DecInput)
		}
	}
	for _, edit := range []func(*SpecialIDs){
		func(s *SpecialIDs) { s.Pad = -1 },
		func(s *SpecialIDs) { s.EOS = -1 },
		func(s *SpecialIDs) { s.Sentinels = nil },
	} {
		cfg := noBOS
		edit(&cfg.Special)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "needs EOS, Pad and sentinels") {
			t.Errorf("special %+v: got %v", cfg.Special, err)
		}
	}
}
