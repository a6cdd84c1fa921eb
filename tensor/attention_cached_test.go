package tensor_test

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"megago/internal/testutil"
	"megago/tensor"
)

// TestAttentionCachedMatchesAttention: AttentionCached over keys and values [B, Tk, G, HS]
// equals Attention over their permutation [B, G, Tk, HS] bit for bit, on every backend,
// in float32 (the SIMD path; HS past its kc: the gathered path) and float64, with GQA,
// several key tiles and the queries of a KV cache's new chunk.
func TestAttentionCachedMatchesAttention(t *testing.T) {
	cases := []struct {
		name                 string
		dt                   tensor.DType
		b, nh, g, tq, tk, hs int
		causal               bool
	}{
		{"decode_gqa", tensor.F32, 1, 4, 2, 1, 150, 8, true},
		{"chunk_tiles", tensor.F32, 2, 2, 2, 70, 300, 16, true},
		{"prefill_mha", tensor.F32, 1, 3, 3, 40, 40, 8, true},
		{"full_g1", tensor.F32, 1, 4, 1, 5, 130, 8, false},
		{"wide_heads", tensor.F32, 1, 2, 1, 3, 140, 600, true},
		{"f64", tensor.F64, 1, 4, 2, 9, 140, 8, true},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			testutil.ForEachBackend(t, func(t *testing.T, dev *tensor.Device) {
				s := dev.NewScope()
				defer s.Close()
				r := rand.New(rand.NewPCG(uint64(i), 7))
				rnd := func(shape ...int) *tensor.Tensor {
					x := make([]float64, tensor.Shape(shape).Numel())
					for j := range x {
						x[j] = r.NormFloat64()
					}
					return tensor.FromSlice(dev, x, shape...).Cast(c.dt)
				}
				q := rnd(c.b, c.nh, c.tq, c.hs)
				k, v := rnd(c.b, c.tk, c.g, c.hs), rnd(c.b, c.tk, c.g, c.hs) // position-major
				o := tensor.AttentionOptions{Causal: c.causal}
				want, _ := tensor.Attention(q, k.Permute(0, 2, 1, 3), v.Permute(0, 2, 1, 3), o)
				got := tensor.AttentionCached(q, k, v, o)
				require.Equal(t, want.Shape(), got.Shape())
				require.Equal(t, tensor.ToSlice[float64](want), tensor.ToSlice[float64](got)) // exact: no NaN here
			})
		})
	}
}

func TestAttentionCachedPanics(t *testing.T) {
	dev := tensor.NewCPU()
	q := tensor.Zeros(dev, tensor.F32, 1, 2, 1, 4)
	k := tensor.Zeros(dev, tensor.F32, 1, 5, 2, 4)
	require.Panics(t, func() { tensor.AttentionCached(q, k, k, tensor.AttentionOptions{Dropout: 0.1}) })
	require.Panics(t, func() { tensor.AttentionCached(q, k.Reshape(5, 2, 4), k, tensor.AttentionOptions{}) })
	require.Panics(t, func() {
		tensor.AttentionCached(q, tensor.Zeros(dev, tensor.F32, 1, 5, 3, 4), k, tensor.AttentionOptions{})
	})
}

// TestReadInto: ReadInto gives ToSlice's values in the caller's slice, converting dtypes.
func TestReadInto(t *testing.T) {
	dev := tensor.NewCPU()
	x := tensor.FromSlice(dev, []float64{1.5, -2, 3.25, 4, 5, 6}, 2, 3)
	buf := make([]float32, 8)
	got := tensor.ReadInto(buf, x)
	require.Equal(t, []float32{1.5, -2, 3.25, 4, 5, 6}, got)
	require.Same(t, &buf[0], &got[0])
	require.Panics(t, func() { tensor.ReadInto(make([]float32, 5), x) })
}
