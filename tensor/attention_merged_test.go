package tensor_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"megago/tensor"
)

// TestAttentionMerged: AttentionMerged's output equals Attention's permuted to
// [B, Tq, NH·HS], and its lse and the gradients of q, k, v and the bias (for an output
// gradient fed in that layout) equal Attention's, bit for bit, for every attention case
// in F32 (the SIMD tile products), F64 and BF16, and for F32 heads wider than the SIMD
// path takes (rows of dOut gathered).
func TestAttentionMerged(t *testing.T) {
	dev := tensor.NewCPU()
	cases := append(attnCases(),
		attnCase{name: "causal_hs64", b: 2, nh: 4, g: 4, tq: 256, tk: 256, hs: 64, causal: true},
		attnCase{name: "wide_heads_hs400", b: 1, nh: 2, g: 1, tq: 20, tk: 20, hs: 400, causal: true})
	for _, dt := range []tensor.DType{tensor.F32, tensor.F64, tensor.BF16} {
		for ci, c := range cases {
			if c.hs > 64 && dt != tensor.F32 {
				continue
			}
			t.Run(fmt.Sprintf("%v/%s", dt, c.name), func(t *testing.T) {
				s := dev.NewScope()
				defer s.Close()
				in := newAttnInputs(dev, c, dt, uint64(ci))
				want, got := attnRunMerged(in, false), attnRunMerged(in, true)
				for name, w := range want {
					require.NotNil(t, got[name], name)
					require.Equal(t, w.Shape(), got[name].Shape(), name)
					require.Equal(t, tensor.ToSlice[float64](w), tensor.ToSlice[float64](got[name]), name)
				}
			})
		}
	}
}

// attnRunMerged is attnRun for AttentionMerged (merged) or Attention's output permuted
// to [B, Tq, NH·HS], with in.dout permuted to that layout.
func attnRunMerged(in attnInputs, merged bool) map[string]*tensor.Tensor {
	b, nh, tq, hs := in.q.Dim(0), in.q.Dim(1), in.q.Dim(2), in.q.Dim(3)
	f := tensor.AttentionMerged
	if !merged {
		f = func(q, k, v *tensor.Tensor, o tensor.AttentionOptions) (out, lse *tensor.Tensor) {
			out, lse = tensor.Attention(q, k, v, o)
			return out.Permute(0, 2, 1, 3).Reshape(b, tq, nh*hs), lse
		}
	}
	return attnRunFunc(in, f, in.dout.Permute(0, 2, 1, 3).Reshape(b, tq, nh*hs))
}
