package nn

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"megago/tensor"
)

// slowRoPE rotates each head of x [B, H, T, HS] (flattened) by the obvious loop: pairs
// (j, j+rd/2) of its first rd channels by the angle pos·inv[j]; the other channels pass.
func slowRoPE(x []float64, b, h, t, hs, rd int, pos []int, inv []float64) []float64 {
	out := append([]float64(nil), x...)
	for r := 0; r < b*h; r++ {
		for i := 0; i < t; i++ {
			row := x[(r*t+i)*hs : (r*t+i+1)*hs]
			o := out[(r*t+i)*hs : (r*t+i+1)*hs]
			for j := 0; j < rd/2; j++ {
				a := float64(pos[i]) * inv[j]
				x1, x2 := row[j], row[j+rd/2]
				o[j] = x1*math.Cos(a) - x2*math.Sin(a)
				o[j+rd/2] = x2*math.Cos(a) + x1*math.Sin(a)
			}
		}
	}
	return out
}

// llama31InvFreq is Llama 3.1's frequency rescaling written as Hugging Face's
// _compute_llama3_parameters states it, element by element.
func llama31InvFreq(rd int, theta, factor float64) []float64 {
	var out []float64
	for j := 0; j < rd; j += 2 {
		f := 1 / math.Pow(theta, float64(j)/float64(rd))
		wl := 2 * math.Pi / f
		if wl > 8192 {
			f = f / factor
		} else if wl >= 8192/4.0 {
			smooth := (8192/wl - 1) / 3
			f = (1-smooth)*f/factor + smooth*f
		}
		out = append(out, f)
	}
	return out
}

func TestRoPEVariantsAgainstLoop(t *testing.T) {
	const b, h, tt, hs = 2, 3, 5, 8
	pos := []int{0, 3, 1000, 20000, 7}
	for _, tc := range []struct {
		name           string
		percent, scale float64
		rd             int
	}{
		{"whole", 1, 0, 8},
		{"half", 0.5, 0, 4},
		{"three-quarters-scaled", 0.75, 8, 6},
		{"whole-scaled", 1, 32, 8},
	} {
		for _, fused := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/fused=%v", tc.name, fused), func(t *testing.T) {
				c := TransformerConfig{Hidden: hs * h, Heads: h, Position: RoPE, RotaryPercent: tc.percent, RoPEScaling: tc.scale,
					RoPETheta: 50}.Defaults()
				ops := fusedOps
				if !fused {
					ops = referenceOps
				}
				dev := tensor.NewCPU()
				rng := tensor.NewRNG(3)
				q := rng.Normal(dev, tensor.F64, tensor.Whole(b, h, tt, hs), 0, 1)
				inv := llama31InvFreq(tc.rd, 50, tc.scale)
				if tc.scale == 0 {
					inv = llama31InvFreq(tc.rd, 50, 1) // factor 1 leaves every frequency
				}
				want := slowRoPE(tensor.ToSlice[float64](q), b, h, tt, hs, tc.rd, pos, inv)
				gq, gk := ropeFor(c, ops)(q, q, AttentionMask{Positions: pos}, 0)
				require.InDeltaSlice(t, want, tensor.ToSlice[float64](gq), 1e-12)
				require.InDeltaSlice(t, want, tensor.ToSlice[float64](gk), 1e-12)
			})
		}
	}
}

func TestRoPEScalingFrequencies(t *testing.T) {
	// Llama 3.1 (theta 500000, head size 128, factor 8): the highest frequencies are kept,
	// the lowest divided by 8, and the smoothed band joins the two continuously.
	inv := ropeInvFreq(128, 500000, 8)
	plain := ropeInvFreq(128, 500000, 1)
	require.Equal(t, plain[0], inv[0])
	require.InDelta(t, plain[63]/8, inv[63], 1e-18)
	for j := range inv {
		wl := 2 * math.Pi / plain[j]
		require.LessOrEqual(t, inv[j], plain[j]*(1+1e-15), j)
		require.GreaterOrEqual(t, inv[j], plain[j]/8*(1-1e-15), j)
		if wl < 2048 {
			require.Equal(t, plain[j], inv[j], j)
		}
	}
}
