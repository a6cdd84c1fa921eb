package tensor_test

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"megago/tensor"
)

// TestAttentionPackedMatchesAttention: AttentionPacked over the first Tk positions of a
// PackedKV, written in chunks (a prompt's, then single decoding steps),
// equals Attention over their permutation bit for bit, whatever it holds past Tk
// (a previous sequence's positions), for head sizes that fill the kernel's panels and not.
func TestAttentionPackedMatchesAttention(t *testing.T) {
	cases := []struct {
		name      string
		nh, g, hs int
		chunks    []int // positions written per Write, then attended after each
		tq        int   // queries of the last chunk attended
	}{
		{"decode_mha", 4, 4, 64, []int{130, 1, 1, 120, 1}, 1},
		{"chunk_gqa_odd_hs", 4, 2, 24, []int{100, 1, 60, 100}, 20},
		{"one_tile", 2, 1, 16, []int{5, 1, 1}, 1},
	}
	dev := tensor.NewCPU()
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := dev.NewScope()
			defer s.Close()
			r := rand.New(rand.NewPCG(uint64(i), 11))
			rnd := func(shape ...int) *tensor.Tensor {
				x := make([]float32, tensor.Shape(shape).Numel())
				for j := range x {
					x[j] = float32(r.NormFloat64())
				}
				return tensor.FromSlice(dev, x, shape...)
			}
			const maxLen = 330
			k, v := rnd(1, maxLen, c.g, c.hs), rnd(1, maxLen, c.g, c.hs) // the slot
			pk := tensor.NewPackedKV(dev, tensor.F32, maxLen, c.g, c.hs)
			if pk == nil {
				t.Skip("no SIMD attention path on this CPU")
			}
			stale := rnd(1, maxLen, c.g, c.hs)
			pk.Write(stale, stale, 0) // a previous sequence's keys and values
			tk := 0
			for _, n := range c.chunks {
				pk.Write(k.Narrow(1, tk, n), v.Narrow(1, tk, n), tk)
				tk += n
				tq := min(n, c.tq)
				q := rnd(1, c.nh, tq, c.hs)
				ks, vs := k.Narrow(1, 0, tk), v.Narrow(1, 0, tk)
				o := tensor.AttentionOptions{Causal: true}
				want, _ := tensor.Attention(q, ks.Permute(0, 2, 1, 3), vs.Permute(0, 2, 1, 3), o)
				got := tensor.AttentionPacked(q, pk, tk, o)
				require.Equal(t, tensor.ToSlice[float32](want), tensor.ToSlice[float32](got), "Tk %d", tk)
			}
		})
	}
}
