package tensor_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"megago/tensor"
)

// TestAttentionOneQueryMatchesTile: a call with one query (a decode step's, whose tile
// the CPU backend computes reading keys and values in place) gives the bits of the same
// query computed as the last row of a two-query call (the packed tile products), for
// head sizes on and off the in-place kernels' multiple of 16, key counts around their
// 16-key blocks and the 128-key tiles, with GQA, in Attention's layout, a KV cache's
// position-major one and head-major slots (AttentionSlots, filled by CopyNarrowFrom).
func TestAttentionOneQueryMatchesTile(t *testing.T) {
	const b, nh, g = 1, 4, 2
	for _, hs := range []int{16, 64, 24} {
		for _, tk := range []int{2, 15, 16, 17, 33, 150, 300} {
			t.Run(fmt.Sprintf("hs%d_tk%d", hs, tk), func(t *testing.T) {
				dev := tensor.NewCPU()
				r := rand.New(rand.NewPCG(uint64(hs), uint64(tk)))
				rnd := func(shape ...int) *tensor.Tensor {
					x := make([]float32, tensor.Shape(shape).Numel())
					for j := range x {
						x[j] = float32(r.NormFloat64())
					}
					return tensor.FromSlice(dev, x, shape...)
				}
				q2 := rnd(b, nh, 2, hs)
				q1 := q2.Narrow(2, 1, 1).Contiguous()        // [B, NH, 1, HS]
				k, v := rnd(b, tk, g, hs), rnd(b, tk, g, hs) // position-major
				kh, vh := k.Permute(0, 2, 1, 3), v.Permute(0, 2, 1, 3)
				o := tensor.AttentionOptions{Causal: true, Scale: 0.3}
				two, _ := tensor.Attention(q2, kh, vh, o)
				want := tensor.ToSlice[float32](two.Narrow(2, 1, 1).Contiguous())
				one, _ := tensor.Attention(q1, kh, vh, o)
				require.Equal(t, want, tensor.ToSlice[float32](one), "Attention") // exact: no NaN here
				require.Equal(t, want, tensor.ToSlice[float32](tensor.AttentionCached(q1, k, v, o)), "AttentionCached")
				// Head-major slots with room for 5 more positions, NaN: never read.
				ks, vs := tensor.Full(dev, tensor.F32, math.NaN(), b, g, tk+5, hs), tensor.Full(dev, tensor.F32, math.NaN(), b, g, tk+5, hs)
				ks.CopyNarrowFrom(2, 0, kh)
				vs.CopyNarrowFrom(2, 0, vh)
				got := tensor.AttentionSlots([]*tensor.Tensor{q1, q2}, []*tensor.Tensor{ks, ks}, []*tensor.Tensor{vs, vs}, []int{tk, tk}, o)
				require.Equal(t, want, tensor.ToSlice[float32](got[0]), "AttentionSlots")
				require.Equal(t, tensor.ToSlice[float32](two), tensor.ToSlice[float32](got[1]), "AttentionSlots, two queries")
			})
		}
	}
}

func TestAttentionSlotsPanics(t *testing.T) {
	dev := tensor.NewCPU()
	q := tensor.Zeros(dev, tensor.F32, 1, 2, 1, 4)
	k := tensor.Zeros(dev, tensor.F32, 1, 2, 5, 4) // [B, G, L, HS]
	one := []*tensor.Tensor{k}
	qs := []*tensor.Tensor{q}
	require.Panics(t, func() { tensor.AttentionSlots(qs, one, one, []int{6}, tensor.AttentionOptions{}) })
	require.Panics(t, func() { tensor.AttentionSlots(qs, one, one, []int{0}, tensor.AttentionOptions{}) })
	require.Panics(t, func() { tensor.AttentionSlots(qs, one, one, nil, tensor.AttentionOptions{}) })
	require.Panics(t, func() { tensor.AttentionSlots(qs, one, one, []int{5}, tensor.AttentionOptions{Dropout: 0.1}) })
	require.Panics(t, func() { k.CopyNarrowFrom(2, 3, tensor.Zeros(dev, tensor.F32, 1, 2, 3, 4)) })
	require.Empty(t, tensor.AttentionSlots(nil, nil, nil, nil, tensor.AttentionOptions{}))
}
