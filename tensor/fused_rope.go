package tensor

import (
	"fmt"
	"math"
)

// RoPE rotates x [..., T, HS] ([B, NH, T, HS] for queries and keys) by the rotary position
// embedding of Hugging Face Llama (rotate_half): with halves x1 = x[..., :HS/2] and
// x2 = x[..., HS/2:] and angle f = positions[t]·theta^(−2j/HS) for j < HS/2, the result
// is (x1·cos f − x2·sin f, x2·cos f + x1·sin f), in one pass. positions[t] is the position
// of token t (under context or sequence parallelism, its global position). The backward
// rotates by −f. The result is defined by RoPEReference. It panics if HS is odd or
// len(positions) is not T.
func RoPE(x *Tensor, positions []int, theta float64) *Tensor {
	checkRoPE("RoPE", x, positions)
	dev := x.Device()
	dev.countFused(FusedRoPE)
	p := RoPEParams{Positions: append([]int(nil), positions...), Theta: theta}
	y := empty(dev, x.dtype, x.shape)
	dev.backend.RotaryEmbedding(y.Span(), x.Span(), p)
	return record1("RoPE", y, []*Tensor{x}, func(gy *Tensor) []*Tensor {
		dx := empty(dev, x.dtype, x.shape)
		inv := p
		inv.Inverse = true
		dev.backend.RotaryEmbedding(dx.Span(), gy.Span(), inv)
		return []*Tensor{dx}
	})
}

// RoPEReference is RoPE's unfused composition, which defines its result (nn's applyRoPE):
// Add(Mul(x, cos), Mul(rotate_half(x), sin)) with rotate_half(x) = Concat(−x2, x1) and
// cos, sin [T, HS] computed in float64 and cast to x's dtype: RoPEFreqs with the
// frequencies theta^(−2j/HS).
func RoPEReference(x *Tensor, positions []int, theta float64) *Tensor {
	checkRoPE("RoPEReference", x, positions)
	hs := x.Dim(-1)
	inv := make([]float64, hs/2)
	for j := range inv {
		inv[j] = math.Pow(theta, -2*float64(j)/float64(hs))
	}
	return RoPEFreqs(x, positions, inv)
}

// RoPEFreqs rotates x [..., T, HS] as RoPEReference does, with the frequencies given: the
// angle of pair j at position positions[t] is positions[t]·inv[j], for variants whose
// frequencies are not theta^(−2j/HS) (Llama 3.1's rescaled ones). It is unfused. It
// panics if HS is odd, len(positions) is not T or len(inv) is not HS/2.
func RoPEFreqs(x *Tensor, positions []int, inv []float64) *Tensor {
	checkRoPE("RoPEFreqs", x, positions)
	hs, t := x.Dim(-1), x.Dim(-2)
	half := hs / 2
	if len(inv) != half {
		panic(fmt.Sprintf("tensor: RoPEFreqs: %d frequencies for a head of %d", len(inv), hs))
	}
	cos := make([]float64, t*hs)
	sin := make([]float64, t*hs)
	for i := 0; i < t; i++ {
		for j, f := range inv {
			a := float64(positions[i]) * f
			c, s := math.Cos(a), math.Sin(a)
			cos[i*hs+j], cos[i*hs+j+half] = c, c
			sin[i*hs+j], sin[i*hs+j+half] = s, s
		}
	}
	dev := x.Device()
	ct := FromSlice(dev, cos, t, hs).Cast(x.DType()) // [T, HS]
	st := FromSlice(dev, sin, t, hs).Cast(x.DType())
	parts := Split(x, -1, half, half)
	rot := Concat(-1, Neg(parts[1]), parts[0]) // rotate_half(x)
	return Add(Mul(x, ct), Mul(rot, st))
}

// ropeCosSin returns the cosine and sine of the angle of pair j of a head of size hs at
// position pos: pos·theta^(−2j/hs).
func ropeCosSin(pos, j, hs int, theta float64) (float64, float64) {
	f := float64(pos) * math.Pow(theta, -2*float64(j)/float64(hs))
	return math.Cos(f), math.Sin(f)
}

func checkRoPE(op string, x *Tensor, positions []int) {
	if len(x.shape) < 2 || !x.dtype.IsFloat() || x.shape[len(x.shape)-1]%2 != 0 || len(positions) != x.shape[len(x.shape)-2] {
		panic(fmt.Sprintf("tensor: %s: input %v %v with %d positions: want a float [..., T, HS] with HS even and T positions",
			op, x.dtype, x.shape, len(positions)))
	}
}
