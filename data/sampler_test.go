package data

import (
	"slices"
	"testing"
)

func TestPretrainingSamplerSlices(t *testing.T) {
	const total, micro, dp = 103, 3, 4 // global batch 12: 8 full batches, 7 samples dropped
	var all []int
	for k := range 8 {
		for r := range dp {
			s := NewPretrainingSampler(total, 0, micro, r, dp)
			if s.NumBatches() != 8 {
				t.Fatalf("NumBatches = %d, want 8", s.NumBatches())
			}
			b := s.Batch(k)
			want := []int{k*12 + r*micro, k*12 + r*micro + 1, k*12 + r*micro + 2}
			if !slices.Equal(b, want) {
				t.Fatalf("rank %d batch %d = %v, want %v", r, k, b, want)
			}
			all = append(all, b...)
		}
	}
	for i, v := range all {
		if v != i {
			t.Fatalf("DP ranks together do not take samples 0..95 in order: %v", all)
		}
	}
}

// Resuming at consumed = k·micro·dp gives the batches a run from 0 gives from batch k on.
func TestPretrainingSamplerResume(t *testing.T) {
	const total, micro, dp = 1000, 4, 3
	for r := range dp {
		full := slices.Collect(NewPretrainingSampler(total, 0, micro, r, dp).Batches())
		for _, k := range []int{0, 1, 7, 40, len(full)} {
			resumed := slices.Collect(NewPretrainingSampler(total, k*micro*dp, micro, r, dp).Batches())
			if len(resumed) != len(full)-k {
				t.Fatalf("rank %d resumed at batch %d: %d batches, want %d", r, k, len(resumed), len(full)-k)
			}
			for j := range resumed {
				if !slices.Equal(resumed[j], full[k+j]) {
					t.Fatalf("rank %d resumed at batch %d: batch %d = %v, want %v", r, k, j, resumed[j], full[k+j])
				}
			}
		}
	}
}

func TestPretrainingSamplerPanics(t *testing.T) {
	for name, f := range map[string]func(){
		"rank ≥ size":        func() { NewPretrainingSampler(10, 0, 1, 2, 2) },
		"zero micro":         func() { NewPretrainingSampler(10, 0, 0, 0, 1) },
		"consumed > total":   func() { NewPretrainingSampler(10, 11, 1, 0, 1) },
		"batch out of range": func() { NewPretrainingSampler(10, 0, 5, 0, 1).Batch(2) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}
