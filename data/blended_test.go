package data

import (
	"context"
	"slices"
	"testing"
)

// Megatron's check value (MEGATRON-FACTS.md).
func TestBlendIndicesCheckValue(t *testing.T) {
	comp, samp, err := BlendIndices([]float64{0.3, 0.7}, 10)
	if err != nil {
		t.Fatal(err)
	}
	wantComp := []int16{1, 0, 1, 1, 0, 1, 1, 0, 1, 1}
	wantSamp := []int64{0, 0, 1, 2, 1, 3, 4, 2, 5, 6}
	if !slices.Equal(comp, wantComp) || !slices.Equal(samp, wantSamp) {
		t.Fatalf("BlendIndices = %v, %v; want %v, %v", comp, samp, wantComp, wantSamp)
	}
	// Unnormalised weights blend the same way.
	comp3, samp3, err := BlendIndices([]float64{3, 7}, 10)
	if err != nil || !slices.Equal(comp3, wantComp) || !slices.Equal(samp3, wantSamp) {
		t.Fatalf("BlendIndices([3 7]) = %v, %v, %v", comp3, samp3, err)
	}
}

func TestBlendSizes(t *testing.T) {
	tests := []struct {
		name  string
		w     []float64
		n     int
		want  []int
		total int
	}{
		// ceil(3·1.005) = 4, ceil(7·1.005) = 8.
		{name: "check value", w: []float64{0.3, 0.7}, n: 10, want: []int{4, 8}, total: 10},
		// ceil(1000/3) = 334 each, ceil(334·1.005 = 335.67) = 336.
		{name: "thirds", w: []float64{1, 1, 1}, n: 1000, want: []int{336, 336, 336}, total: 1002},
		{name: "zero weight", w: []float64{1, 0}, n: 100, want: []int{101, 0}, total: 100},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, total, err := BlendSizes(tc.w, tc.n)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) || total != tc.total {
				t.Errorf("BlendSizes(%v, %d) = %v, %d; want %v, %d", tc.w, tc.n, got, total, tc.want, tc.total)
			}
		})
	}
	for _, w := range [][]float64{nil, {0, 0}, {-1, 2}} {
		if _, _, err := BlendSizes(w, 10); err == nil {
			t.Errorf("BlendSizes(%v) accepted", w)
		}
	}
}

// The proportions of a long blend follow the weights, and each component's samples are
// taken in order without gaps.
func TestBlendIndicesProportions(t *testing.T) {
	w := []float64{0.5, 0.2, 0.3}
	const n = 10000
	comp, samp, err := BlendIndices(w, n)
	if err != nil {
		t.Fatal(err)
	}
	count := make([]int64, len(w))
	for i := range comp {
		if samp[i] != count[comp[i]] {
			t.Fatalf("sample %d takes component %d's sample %d, want %d", i, comp[i], samp[i], count[comp[i]])
		}
		count[comp[i]]++
	}
	for i, c := range count {
		// the greedy rule keeps each count within one of w_i·t
		if d := float64(c) - w[i]*n; d > 1 || d < -1 {
			t.Errorf("component %d: %d samples, want %v ± 1", i, c, w[i]*n)
		}
	}
}

func TestBlendedGPT(t *testing.T) {
	ctx := context.Background()
	w := []float64{0.3, 0.7}
	const target = 40
	per, total, err := BlendSizes(w, target)
	if err != nil {
		t.Fatal(err)
	}
	var parts []Dataset[GPTSample]
	for i, n := range per {
		src := &MemorySource{}
		for q := range 10 {
			src.Seqs = append(src.Seqs, []int32{int32(1000*i + q), int32(1000*i + q), int32(1000*i + q)})
		}
		ds, err := NewGPTDataset(ctx, src, SplitTrain, n, GPTConfig{SeqLen: 4, Split: "1", EOD: -1, Seed: uint64(i)})
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, ds)
	}
	blend, err := NewBlendedDataset(parts, w, total)
	if err != nil {
		t.Fatal(err)
	}
	if blend.Len() != total {
		t.Fatalf("blend has %d samples, want %d", blend.Len(), total)
	}
	for i := range blend.Len() {
		c, s := blend.Locate(i)
		got, want := blend.Sample(i), parts[c].Sample(s)
		if !slices.Equal(got.Tokens, want.Tokens) || got.Tokens[0]/1000 != int32(c) {
			t.Fatalf("blended sample %d = %v, want component %d sample %d = %v", i, got.Tokens, c, s, want.Tokens)
		}
	}
	if _, err := NewBlendedDataset(parts, w, 10*total); err == nil {
		t.Error("a blend larger than its components was accepted")
	}
}
