package cuda

import (
	"math"
	"slices"
	"testing"

	"megago/tensor"
)

// Attention over KV-cache slots (tensor.AttentionSlots, AttentionSlotsRows: a decode
// step's attention) on this backend: flash_fwd reading the first n positions of each
// slot in place (all calls in one launch, or, slots of different lengths, a launch each)
// must give Attention's values over those positions copied out, bit for bit (the same
// kernel), with no host fallback; a head size the kernels are not built for runs the
// fallback and matches the CPU backend's.

func TestGPUAttentionSlotsMatchesAttention(t *testing.T) {
	b := openTestBackend(t)
	gpu := tensor.NewDevice(b)
	const maxLen = 40 // L, each slot's positions
	cases := []struct {
		name      string
		nh, g, hs int
		tq        []int // each sequence's new tokens (queries)
		n         []int // each sequence's attended positions, tq[i] ≤ n[i] ≤ its slots' length
		l         []int // each sequence's slots' length, maxLen where nil
		fallback  bool
	}{
		{"rows/gqa", 4, 2, 32, []int{1, 1, 1}, []int{1, 17, maxLen}, nil, false},
		{"prefill+decode", 4, 4, 16, []int{9, 1}, []int{9, 33}, nil, false},
		{"slots of two lengths", 2, 2, 32, []int{1, 1}, []int{20, 7}, []int{maxLen, 24}, false}, // a launch each
		{"hs24/fallback", 2, 1, 24, []int{1, 3}, []int{5, 12}, nil, true},
	}
	for _, dt := range []tensor.DType{tensor.F32, tensor.BF16} {
		for _, tc := range cases {
			t.Run(dt.String()+"/"+tc.name, func(t *testing.T) {
				o := tensor.AttentionOptions{Scale: 1 / math.Sqrt(float64(tc.hs)), Causal: true}
				var qs, ks, vs []*tensor.Tensor
				for i := range tc.n {
					seed := uint64(10 * i)
					qs = append(qs, rowLeaf(gpu, dt, seed+1, -2, 2, 1, tc.nh, tc.tq[i], tc.hs).Detach())
					l := maxLen
					if tc.l != nil {
						l = tc.l[i]
					}
					ks = append(ks, rowLeaf(gpu, dt, seed+2, -2, 2, 1, tc.g, l, tc.hs).Detach())
					vs = append(vs, rowLeaf(gpu, dt, seed+3, -1, 1, 1, tc.g, l, tc.hs).Detach())
				}
				before := b.fallbacks.Load()
				got := tensor.AttentionSlots(qs, ks, vs, tc.n, o)
				if fell := b.fallbacks.Load() - before; (fell > 0) != tc.fallback {
					t.Errorf("%d host fallback calls, want some: %v", fell, tc.fallback)
				}
				for i := range tc.n {
					var want *tensor.Tensor
					if tc.fallback { // the CPU backend's slot attention
						cpu := tensor.NewCPU()
						want = tensor.AttentionSlots([]*tensor.Tensor{qs[i].To(cpu)}, []*tensor.Tensor{ks[i].To(cpu)},
							[]*tensor.Tensor{vs[i].To(cpu)}, tc.n[i:i+1], o)[0]
					} else { // Attention on this backend over the positions copied out
						want, _ = tensor.Attention(qs[i], ks[i].Narrow(2, 0, tc.n[i]), vs[i].Narrow(2, 0, tc.n[i]), o)
					}
					sameBits(t, tc.name, i, values(got[i]), values(want))
				}
				if slices.ContainsFunc(tc.tq, func(n int) bool { return n != 1 }) {
					return // not a decode step's one-token sequences
				}
				// The decode step's form: one query row per sequence in, one output row out.
				q := tensor.Concat(0, qs...).Reshape(1, len(qs), tc.nh, tc.hs)
				out := tensor.Empty(gpu, dt, 1, len(qs), tc.nh*tc.hs)
				tensor.AttentionSlotsRows(out, q, ks, vs, tc.n, o)
				for i := range tc.n {
					sameBits(t, tc.name+"/rows", i, values(out.Narrow(1, i, 1)), values(got[i]))
				}
			})
		}
	}
}

// sameBits reports an error unless got and want are equal element by element (as
// float64s widened from the tensors' dtype: equal exactly when their bits are).
func sameBits(t *testing.T, name string, seq int, got, want []float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: sequence %d: %d values, want %d", name, seq, len(got), len(want))
	}
	for j := range got {
		if got[j] != want[j] {
			t.Errorf("%s: sequence %d: value %d = %v, want %v", name, seq, j, got[j], want[j])
			return
		}
	}
}
