package nn

import (
	"math"

	"megago/tensor"
)

// ropeFunc rotates queries q [B, NH/tp, T, HS] and keys k [B, G/tp, T, HS] by the
// positions of their tokens: positions, or past..past+T−1 when positions is nil (past:
// the tokens already in a KV cache). An attention layer holds one, chosen by
// ropeFor at construction.
type ropeFunc func(q, k *tensor.Tensor, positions []int, past int) (*tensor.Tensor, *tensor.Tensor)

// ropeFor returns the rotation of attention layers built with c: rotary embeddings with
// c.Position RoPE, none otherwise.
func ropeFor(c TransformerConfig) ropeFunc {
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
		return applyRoPE(q, pos, c.RoPETheta), applyRoPE(k, pos, c.RoPETheta)
	}
}

// applyRoPE rotates q or k [B, NH, T, HS] by position as Hugging Face Llama does
// (rotate_half: the head is split in halves x1, x2 and rotated as (x1·cos − x2·sin,
// x2·cos + x1·sin), with frequency θ^(−2i/HS) for i < HS/2). positions[t] is the position
// of token t.
func applyRoPE(x *tensor.Tensor, positions []int, theta float64) *tensor.Tensor {
	hs := x.Dim(-1)
	t := x.Dim(-2)
	half := hs / 2
	cos := make([]float64, t*hs)
	sin := make([]float64, t*hs)
	for i := 0; i < t; i++ {
		for j := 0; j < half; j++ {
			f := float64(positions[i]) * math.Pow(theta, -2*float64(j)/float64(hs))
			c, s := math.Cos(f), math.Sin(f)
			cos[i*hs+j], cos[i*hs+j+half] = c, c
			sin[i*hs+j], sin[i*hs+j+half] = s, s
		}
	}
	dev := x.Device()
	ct := tensor.FromSlice(dev, cos, t, hs).Cast(x.DType()) // [T, HS]
	st := tensor.FromSlice(dev, sin, t, hs).Cast(x.DType())
	parts := tensor.Split(x, -1, half, half)
	rot := tensor.Concat(-1, tensor.Neg(parts[1]), parts[0]) // rotate_half(x)
	return tensor.Add(tensor.Mul(x, ct), tensor.Mul(rot, st))
}
