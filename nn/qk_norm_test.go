package nn

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"megago/parallel"
	"megago/tensor"
)

// TestQKNormMakesAttentionScaleInvariant checks what query/key norms are for: scaling the
// query and key rows of the QKV weight leaves the attention's output unchanged with
// QKNorm (the norms undo it, up to their ε) and changes it without.
func TestQKNormMakesAttentionScaleInvariant(t *testing.T) {
	const c, nh, g, hs = 16, 4, 2, 4
	for _, tc := range []struct {
		name   string
		qkNorm bool
		norm   Norm
	}{{"rmsnorm", true, RMSNormKind}, {"layernorm", true, LayerNormKind}, {"none", false, RMSNormKind}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := TransformerConfig{NumLayers: 1, Hidden: c, Heads: nh, KVHeads: g, Vocab: 10, Position: RoPE,
				Norm: tc.norm, QKNorm: tc.qkNorm, NormEps: 1e-12}
			b := testBuilder(parallel.Self(), false)
			a := NewSelfAttention(b, "attn", cfg)
			names := map[string]tensor.Shape{}
			for _, p := range a.Params() {
				names[p.Name] = p.Shape()
			}
			if tc.qkNorm {
				require.Equal(t, tensor.Shape{hs}, names["attn.q_norm.weight"])
				require.Equal(t, tensor.Shape{hs}, names["attn.k_norm.weight"])
			} else {
				require.NotContains(t, names, "attn.q_norm.weight")
			}
			x := b.RNG.Normal(b.Dev, tensor.F64, tensor.Whole(2, 5, c), 0, 1)
			p := Eval(context.Background())
			m := AttentionMask{Causal: true}
			before := tensor.ToSlice[float64](a.Forward(p, x, m, nil))
			// Rows per group: NH/G query heads, one key head, one value head, HS rows each.
			w := tensor.ToSlice[float64](a.QKV.Weight.Tensor)
			per := (nh/g + 2) * hs
			for r := 0; r < g*per; r++ {
				if r%per < (nh/g+1)*hs { // query or key row
					for j := 0; j < c; j++ {
						w[r*c+j] *= 5
					}
				}
			}
			a.QKV.Weight.Tensor.CopyFrom(tensor.FromSlice(b.Dev, w, g*per, c))
			after := tensor.ToSlice[float64](a.Forward(p, x, m, nil))
			if tc.qkNorm {
				require.InDeltaSlice(t, before, after, 1e-9)
			} else {
				require.NotEqual(t, before, after)
			}
		})
	}
}
