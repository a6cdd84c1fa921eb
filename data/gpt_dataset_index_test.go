package data

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"
)

// The worked example of MEGATRON-FACTS.md: lengths [5,3,7], documents read in the order
// [0,1,2], s = 4 → rows (0,0), (0,4), (2,0), (2,4): 3 samples.
func TestBuildSampleIndexWorkedExample(t *testing.T) {
	sizes := []int{5, 3, 7}
	got := buildSampleIndex(func(d int64) int { return sizes[d] }, []int64{0, 1, 2}, 4)
	want := []int64{0, 0, 0, 4, 2, 0, 2, 4}
	if !slices.Equal(got, want) {
		t.Fatalf("sample index = %v, want %v", got, want)
	}
}

func TestGPTEpochs(t *testing.T) {
	// 100 tokens per epoch, s = 10: ⌊99/10⌋ = 9 samples per epoch, threshold ⌊0.8·9⌋ = 7.
	const tokens, s = 100, 10
	tests := []struct {
		name         string
		samples      int
		wantEpochs   int
		wantSeparate bool
	}{
		{name: "unspecified is one epoch", samples: 0, wantEpochs: 1},
		{name: "fits one epoch", samples: 9, wantEpochs: 1},                // needs 91 ≤ 100 tokens
		{name: "one over", samples: 10, wantEpochs: 2, wantSeparate: true}, // 1 from the last < 7
		{name: "6 from last", samples: 15, wantEpochs: 2, wantSeparate: true},
		{name: "7 from last", samples: 16, wantEpochs: 2},                     // 7 is not < 7
		{name: "full second epoch", samples: 19, wantEpochs: 2},               // needs 191 ≤ 200
		{name: "third epoch", samples: 20, wantEpochs: 3, wantSeparate: true}, // ⌊199/10⌋ = 19 before
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e, sep := gptEpochs(tokens, s, tc.samples)
			if e != tc.wantEpochs || sep != tc.wantSeparate {
				t.Errorf("gptEpochs(%d, %d, %d) = %d, %v; want %d, %v", tokens, s, tc.samples, e, sep, tc.wantEpochs, tc.wantSeparate)
			}
		})
	}
}

// randomSource returns n sequences of lengths in [0, maxLen] (some empty) whose token at
// offset o of sequence q is q·1000 + o, so every token position is recognisable.
func randomSource(r *rand.Rand, n, maxLen int) *MemorySource {
	src := &MemorySource{Seqs: make([][]int32, n)}
	for q := range src.Seqs {
		l := r.IntN(maxLen + 1)
		if r.IntN(5) == 0 {
			l = 0
		}
		for o := range l {
			src.Seqs[q] = append(src.Seqs[q], int32(q*1000+o))
		}
	}
	return src
}

// TestGPTSamplesCoverEveryToken is the property test of the GPT indices. Let the
// document index (E epochs of the split's documents, shuffled) be read as one stream of
// E·tpe tokens, and N = ⌊(E·tpe − 1)/s⌋ = Len(). Then unshuffled sample k is exactly
// stream positions [k·s, k·s + s], so:
//   - every stream position q < N·s is the input of exactly one sample, and every
//     position 1 ≤ q ≤ N·s the label of exactly one sample; position k·s (0 < k < N) is
//     the last label of sample k−1 and the first input of sample k;
//   - the leftover is the tail: position N·s is a label only, and the last
//     E·tpe − N·s − 1 positions (0 to s−1 of them) are in no sample; position 0 is an
//     input only;
//   - since each token appears E times in the stream, a token's input count is E minus
//     its occurrences at positions ≥ N·s, its label count E minus its occurrences at
//     position 0 or beyond N·s.
//
// The shuffle index is checked to be a permutation by counting through Sample.
func TestGPTSamplesCoverEveryToken(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	separateSeen := 0
	for trial := range 300 {
		src := randomSource(r, 1+r.IntN(12), 20)
		total := 0
		for _, s := range src.Seqs {
			total += len(s)
		}
		if total < 2 {
			continue
		}
		s := 1 + r.IntN(10)
		numSamples := r.IntN(4*total/s + 2)
		cfg := GPTConfig{SeqLen: s, Seed: r.Uint64(), Split: "1", EOD: -1}
		ds, err := NewGPTDataset(context.Background(), src, SplitTrain, numSamples, cfg)
		if err != nil {
			t.Fatal(err)
		}
		in := ds.Info()
		E, tpe := in.Epochs, in.TokensPerEpoch
		N := (E*tpe - 1) / s
		if ds.Len() != N || N < numSamples || (E > 1 && (E-1)*tpe >= numSamples*s+1) {
			t.Fatalf("trial %d: %d samples from %d epochs of %d tokens, s=%d, asked %d", trial, ds.Len(), E, tpe, s, numSamples)
		}
		checkDocumentIndex(t, ds, len(src.Seqs))
		if in.SeparateLast {
			separateSeen++
		}

		var stream []int32
		for _, d := range ds.docIndex {
			stream = append(stream, src.Seqs[d]...)
		}
		wantIn, wantLabel := map[int32]int{}, map[int32]int{}
		for q, tok := range stream {
			if q < N*s {
				wantIn[tok]++
			}
			if q >= 1 && q <= N*s {
				wantLabel[tok]++
			}
		}
		for k := range N {
			got, err := ds.readUnshuffled(nil, k, k)
			if err != nil {
				t.Fatalf("trial %d: %v", trial, err)
			}
			if !slices.Equal(got, stream[k*s:k*s+s+1]) {
				t.Fatalf("trial %d: unshuffled sample %d = %v, want stream[%d:%d] = %v", trial, k, got, k*s, k*s+s+1, stream[k*s:k*s+s+1])
			}
		}
		gotIn, gotLabel := map[int32]int{}, map[int32]int{}
		for i := range N {
			smp := ds.Sample(i)
			for _, tok := range smp.Tokens {
				gotIn[tok]++
			}
			for _, tok := range smp.Labels {
				gotLabel[tok]++
			}
		}
		for q, seq := range src.Seqs {
			for o, tok := range seq {
				if gotIn[tok] != wantIn[tok] || gotLabel[tok] != wantLabel[tok] {
					t.Fatalf("trial %d: token (%d, %d) is input %d, label %d times; want %d, %d",
						trial, q, o, gotIn[tok], gotLabel[tok], wantIn[tok], wantLabel[tok])
				}
				tail := 0
				for p := N * s; p < len(stream); p++ {
					if stream[p] == tok {
						tail++
					}
				}
				if wantIn[tok] != E-tail {
					t.Fatalf("trial %d: token (%d, %d) input count %d, want E − tail = %d − %d", trial, q, o, wantIn[tok], E, tail)
				}
			}
		}
		if left := len(stream) - N*s - 1; left < 0 || left >= s {
			t.Fatalf("trial %d: %d tokens left over, want 0 to s−1 = %d", trial, left, s-1)
		}
	}
	if separateSeen == 0 {
		t.Error("no trial shuffled the last epoch separately; widen the random sizes")
	}
}

// checkDocumentIndex checks that every document of the split appears Epochs times and,
// when the last epoch is separate, that the last epoch and the samples that need it come
// last.
func checkDocumentIndex(t *testing.T, ds *GPTDataset, n int) {
	t.Helper()
	in := ds.Info()
	count := make([]int, n)
	for _, d := range ds.docIndex {
		count[d]++
	}
	for d := in.First; d < in.Last; d++ {
		if count[d] != in.Epochs {
			t.Fatalf("document %d appears %d times in %d epochs", d, count[d], in.Epochs)
		}
	}
	if !in.SeparateLast {
		return
	}
	D := in.Last - in.First
	last := slices.Clone(ds.docIndex[len(ds.docIndex)-D:])
	slices.Sort(last)
	for i, d := range last {
		if d != int64(in.First+i) {
			t.Fatalf("last epoch of the document index is not one of each document: %v", last)
		}
	}
	before := ((in.Epochs-1)*in.TokensPerEpoch - 1) / ds.cfg.SeqLen
	for i, j := range ds.shuffle {
		if (i < before) != (j < int64(before)) {
			t.Fatalf("shuffle index mixes the last epoch's samples (from %d) with the others at %d: %d", before, i, j)
		}
	}
}

func TestBuildShuffleIndexSeparate(t *testing.T) {
	idx := buildShuffleIndex(6, 10, newRNG(1, "test", 0))
	first, last := slices.Clone(idx[:6]), slices.Clone(idx[6:])
	slices.Sort(first)
	slices.Sort(last)
	if !slices.Equal(first, []int64{0, 1, 2, 3, 4, 5}) || !slices.Equal(last, []int64{6, 7, 8, 9}) {
		t.Fatalf("shuffle index %v does not keep [0,6) before [6,10)", idx)
	}
}
