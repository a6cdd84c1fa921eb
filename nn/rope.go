package nn

import (
	"fmt"
	"math"
	"slices"

	"megago/tensor"
)

// ropeFunc rotates queries q [B, NH/tp, T, HS] and keys k [B, G/tp, T, HS] by the
// positions of their tokens: m.PositionIDs (each sample's), else m.Positions, else
// past..past+T−1 (past: the tokens already in a KV cache). An attention layer holds
// one, chosen by ropeFor at construction.
type ropeFunc func(q, k *tensor.Tensor, m AttentionMask, past int) (*tensor.Tensor, *tensor.Tensor)

// ropeFor returns the rotation of attention layers built with c (after Defaults): rotary
// embeddings with c.Position RoPE, none otherwise. With c.RotaryPercent < 1 only the
// first rotaryDim channels of each head rotate, with frequencies over that dimension
// (Megatron's RotaryEmbedding); with c.RoPEScaling the frequencies are Llama 3.1's
// (ropeInvFreq), applied by the unfused tensor.RoPEFreqs.
func ropeFor(c TransformerConfig, ops layerOps) ropeFunc {
	if c.Position != RoPE {
		return func(q, k *tensor.Tensor, _ AttentionMask, _ int) (*tensor.Tensor, *tensor.Tensor) { return q, k }
	}
	rot := c.rotaryDim()
	rotate := func(x *tensor.Tensor, pos []int) *tensor.Tensor { return ops.rope(x, pos, c.RoPETheta) }
	if c.RoPEScaling != 0 {
		inv := ropeInvFreq(rot, c.RoPETheta, c.RoPEScaling)
		rotate = func(x *tensor.Tensor, pos []int) *tensor.Tensor { return tensor.RoPEFreqs(x, pos, inv) }
	}
	if rot < c.HeadSize {
		whole := rotate
		rotate = func(x *tensor.Tensor, pos []int) *tensor.Tensor {
			parts := tensor.Split(x, -1, rot, c.HeadSize-rot) // [..., rot], [..., HS−rot]
			return tensor.Concat(-1, whole(parts[0], pos), parts[1])
		}
	}
	return func(q, k *tensor.Tensor, m AttentionMask, past int) (*tensor.Tensor, *tensor.Tensor) {
		if m.PositionIDs != nil {
			return rotateSamples(q, m.PositionIDs, rotate), rotateSamples(k, m.PositionIDs, rotate)
		}
		pos := m.Positions
		if pos == nil {
			pos = make([]int, q.Dim(2))
			for i := range pos {
				pos[i] = past + i
			}
		}
		return rotate(q, pos), rotate(k, pos)
	}
}

// rotateSamples rotates each sample b of x [B, H, T, HS] by its positions rows[b] [T]:
// in one call when every sample has the same positions, else sample by sample. It
// panics if rows does not hold B rows.
func rotateSamples(x *tensor.Tensor, rows [][]int, rotate func(*tensor.Tensor, []int) *tensor.Tensor) *tensor.Tensor {
	b := x.Dim(0)
	if len(rows) != b {
		panic(fmt.Sprintf("nn: RoPE: positions of %d samples for %v", len(rows), x.Shape()))
	}
	if !slices.ContainsFunc(rows, func(r []int) bool { return !slices.Equal(r, rows[0]) }) {
		return rotate(x, rows[0])
	}
	ones := make([]int, b)
	for i := range ones {
		ones[i] = 1
	}
	parts := tensor.Split(x, 0, ones...) // B × [1, H, T, HS]
	for i, p := range parts {
		parts[i] = rotate(p, rows[i])
	}
	return tensor.Concat(0, parts...)
}

// rotaryDim returns the channels of a head that RoPE rotates: int(HS·RotaryPercent), as
// Megatron truncates it, or HS when RotaryPercent is 0 or 1 (c after Defaults).
func (c TransformerConfig) rotaryDim() int {
	if c.RotaryPercent == 0 || c.RotaryPercent >= 1 {
		return c.HeadSize
	}
	return int(float64(c.HeadSize) * c.RotaryPercent)
}

// ropeInvFreq returns the rd/2 rotary frequencies theta^(−2j/rd) of a rotary dimension
// rd, rescaled as Llama 3.1 (and Megatron's RotaryEmbedding._apply_scaling) do with
// factor: frequencies whose wavelength 2π/f exceeds 8192 (the original context) are
// divided by factor, those below 8192/4 kept, and those between interpolated smoothly
// with s = (8192/wavelength − 1)/(4 − 1): (1−s)·f/factor + s·f.
func ropeInvFreq(rd int, theta, factor float64) []float64 {
	const oldContext, lowFreqFactor, highFreqFactor = 8192.0, 1.0, 4.0
	lowWavelen, highWavelen := oldContext/lowFreqFactor, oldContext/highFreqFactor
	inv := make([]float64, rd/2)
	for j := range inv {
		f := math.Pow(theta, -2*float64(j)/float64(rd))
		switch wavelen := 2 * math.Pi / f; {
		case wavelen < highWavelen:
		case wavelen > lowWavelen:
			f /= factor
		default:
			s := (oldContext/wavelen - lowFreqFactor) / (highFreqFactor - lowFreqFactor)
			f = (1-s)*f/factor + s*f
		}
		inv[j] = f
	}
	return inv
}
