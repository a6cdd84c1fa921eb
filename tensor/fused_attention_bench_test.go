package tensor

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkAttention times causal attention at NH = 4, HS = 64 in float32, at B = 1 and
// at the shapes of megago bench's workloads W2 (B = 8, T = 256) and W3 (B = 2, T = 2048):
// the fused op (Attention), and at B = 1 beside it the unfused composition that nn's
// attention used before it (AttentionReference without its lse: scores, masked softmax,
// probabilities·v) at the sizes where the latter's [T, T] scores still fit comfortably:
//
//	go test ./tensor -run '^$' -bench 'Attention/' -benchtime 3x
//
// GFLOP/s counts the useful work of causal attention: forward 2·B·NH·T²·HS (the two
// products of the full square, 4·B·NH·T²·HS, halved by the mask), backward 2.5 times that
// (five products), for both paths (the unfused one computes the whole square).
func BenchmarkAttention(b *testing.B) {
	const nh, hs = 4, 64
	type shape struct {
		name     string
		batch, t int
		unfused  bool // also time the unfused composition
	}
	shapes := []shape{{"T=256", 1, 256, true}, {"T=1024", 1, 1024, true}, {"T=2048", 1, 2048, true}, {"T=4096", 1, 4096, false},
		{"W2", 8, 256, false}, {"W3", 2, 2048, false}} // the attention of megago bench's workloads W2 and W3
	for _, sh := range shapes {
		for _, fused := range []bool{true, false} {
			if !fused && !sh.unfused {
				continue
			}
			for _, backward := range []bool{false, true} {
				name := sh.name + "/fused"
				if !fused {
					name = sh.name + "/unfused"
				}
				flops := 2.0 * float64(sh.batch) * nh * float64(sh.t) * float64(sh.t) * hs
				if backward {
					name += "/forward+backward"
					flops *= 3.5
				} else {
					name += "/forward"
				}
				b.Run(name, func(b *testing.B) { benchAttention(b, fused, backward, Shape{sh.batch, nh, sh.t, hs}, flops) })
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
