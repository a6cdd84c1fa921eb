package tensor

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkAttention times causal attention at B = 1, NH = 4, HS = 64 in float32: the
// fused op (Attention) beside the unfused composition that nn's attention used before it
// (AttentionReference without its lse: scores, masked softmax, probabilities·v) at the
// sizes where the latter's [T, T] scores still fit comfortably:
//
//	go test ./tensor -run '^$' -bench 'Attention/' -benchtime 3x
//
// GFLOP/s counts the useful work of causal attention: forward 2·B·NH·T²·HS (the two
// products of the full square, 4·B·NH·T²·HS, halved by the mask), backward 2.5 times that
// (five products), for both paths (the unfused one computes the whole square).
func BenchmarkAttention(b *testing.B) {
	const batch, nh, hs = 1, 4, 64
	for _, tlen := range []int{256, 1024, 2048, 4096} {
		for _, fused := range []bool{true, false} {
			if !fused && tlen > 2048 {
				continue
			}
			for _, backward := range []bool{false, true} {
				name := fmt.Sprintf("T=%d/fused", tlen)
				if !fused {
					name = fmt.Sprintf("T=%d/unfused", tlen)
				}
				flops := 2.0 * batch * nh * float64(tlen) * float64(tlen) * hs
				if backward {
					name += "/forward+backward"
					flops *= 3.5
				} else {
					name += "/forward"
				}
				b.Run(name, func(b *testing.B) { benchAttention(b, fused, backward, Shape{batch, nh, tlen, hs}, flops) })
			}
		}
	}
}

// benchAttention runs causal attention of q, k, v shaped qs (forward, or forward and
// backward) b.N times and reports flops per second.
func benchAttention(b *testing.B, fused, backward bool, qs Shape, flops float64) {
	dev := NewCPU()
	r := rand.New(rand.NewPCG(1, 2))
	x := func() *Tensor {
		v := make([]float32, qs.Numel())
		for i := range v {
			v[i] = float32(2*r.Float64() - 1)
		}
		return FromSlice(dev, v, qs...)
	}
	q, k, v, dout := x(), x(), x(), x()
	o := AttentionOptions{Causal: true}
	attend := func(q, k, v *Tensor) *Tensor {
		if fused {
			out, _ := Attention(q, k, v, o)
			return out
		}
		out, _, _ := attendUnfused(q, k, v, o, checkAttention("bench", q, k, v, o))
		return out
	}
	b.ResetTimer()
	for range b.N {
		s := dev.NewScope()
		if backward {
			attend(q.Detach().SetRequiresGrad(true), k.Detach().SetRequiresGrad(true), v.Detach().SetRequiresGrad(true)).BackwardWithGrad(dout)
		} else {
			dev.NoGrad(func() { attend(q, k, v) })
		}
		s.Close()
	}
	b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}
