package nn

import (
	"megago/tensor"
)

// ropeFunc rotates queries q [B, NH/tp, T, HS] and keys k [B, G/tp, T, HS] by the
// positions of their tokens: positions, or past..past+T−1 when positions is nil (past:
// the tokens already in a KV cache). An attention layer holds one, chosen by
// ropeFor at construction.
type ropeFunc func(q, k *tensor.Tensor, positions []int, past int) (*tensor.Tensor, *tensor.Tensor)

// ropeFor returns the rotation of attention layers built with c: rotary embeddings with
// c.Position RoPE, none otherwise.
func ropeFor(c TransformerConfig, ops layerOps) ropeFunc {
	if c.Position != RoPE {
		return func(q, k *tensor.Tensor, _ []int, _ int) (*tensor.Tensor, *tensor.Tensor) { return q, k }
	}
	return func(q, k *tensor.Tensor, pos []int, past int) (*tensor.Tensor, *tensor.Tensor) {
		if pos == nil {
			pos = make([]int, q.Dim(2))
			for i := range pos {
				pos[i] = past + i
			}
		}
		return ops.rope(q, pos, c.RoPETheta), ops.rope(k, pos, c.RoPETheta)
	}
}
