package tensor_test

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"megago/internal/testutil"
	"megago/tensor"
)

// TestAttentionCachedBatchMatchesAttention: AttentionCachedBatch over sequences of
// different lengths (one query over many keys, a chunk over several key tiles, several
// query tiles, GQA) gives each sequence Attention's output over its permuted keys and
// values bit for bit, in float32 and float64.
func TestAttentionCachedBatchMatchesAttention(t *testing.T) {
	type seq struct{ b, tq, tk int }
	seqs := []seq{{1, 1, 150}, {1, 70, 300}, {2, 1, 7}, {1, 130, 130}, {1, 1, 1}, {1, 3, 260}}
	for _, dt := range []tensor.DType{tensor.F32, tensor.F64} {
		t.Run(dt.String(), func(t *testing.T) {
			testutil.ForEachBackend(t, func(t *testing.T, dev *tensor.Device) {
				s := dev.NewScope()
				defer s.Close()
				r := rand.New(rand.NewPCG(3, 9))
				rnd := func(shape ...int) *tensor.Tensor {
					x := make([]float64, tensor.Shape(shape).Numel())
					for j := range x {
						x[j] = r.NormFloat64()
					}
					return tensor.FromSlice(dev, x, shape...).Cast(dt)
				}
				const nh, g, hs = 4, 2, 16
				var qs, ks, vs []*tensor.Tensor
				for _, sq := range seqs {
					qs = append(qs, rnd(sq.b, nh, sq.tq, hs))
					ks, vs = append(ks, rnd(sq.b, sq.tk, g, hs)), append(vs, rnd(sq.b, sq.tk, g, hs)) // position-major
				}
				o := tensor.AttentionOptions{Causal: true, Scale: 0.3}
				got := tensor.AttentionCachedBatch(qs, ks, vs, o)
				require.Len(t, got, len(seqs))
				for i := range seqs {
					want, _ := tensor.Attention(qs[i], ks[i].Permute(0, 2, 1, 3), vs[i].Permute(0, 2, 1, 3), o)
					require.Equal(t, want.Shape(), got[i].Shape())
					require.Equal(t, tensor.ToSlice[float64](want), tensor.ToSlice[float64](got[i]), "sequence %d", i) // exact: no NaN here
				}
			})
		})
	}
}

func TestAttentionCachedBatchPanics(t *testing.T) {
	dev := tensor.NewCPU()
	q := tensor.Zeros(dev, tensor.F32, 1, 2, 1, 4)
	k := tensor.Zeros(dev, tensor.F32, 1, 5, 2, 4)
	one := []*tensor.Tensor{k}
	require.Panics(t, func() { tensor.AttentionCachedBatch([]*tensor.Tensor{q}, one, nil, tensor.AttentionOptions{}) })
	require.Panics(t, func() {
		tensor.AttentionCachedBatch([]*tensor.Tensor{q}, one, one, tensor.AttentionOptions{Dropout: 0.1})
	})
	q8 := tensor.Zeros(dev, tensor.F32, 1, 2, 1, 8)
	k8 := tensor.Zeros(dev, tensor.F32, 1, 5, 2, 8)
	require.Panics(t, func() {
		tensor.AttentionCachedBatch([]*tensor.Tensor{q, q8}, []*tensor.Tensor{k, k8}, []*tensor.Tensor{k, k8}, tensor.AttentionOptions{})
	})
	require.Empty(t, tensor.AttentionCachedBatch(nil, nil, nil, tensor.AttentionOptions{}))
}
