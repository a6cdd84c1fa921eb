package tensor

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkAttentionSlotsRows times the attention of a decode step of one-token
// sequences (AttentionSlotsRows) at GPT-2 124M's shape: 12 layers of 12 heads of 64, each
// sequence over the first 161 positions of its own slots [1, 12, 1024, 64] (megago serve's at GPT-2's 1024 positions), one op per
// layer. An op is a whole step (12 layers, so that each layer's caches come from memory
// as in a serving step, where the weights' products evict them); GB/s counts the keys
// and values read.
//
//	go test ./tensor -run '^$' -bench 'AttentionSlotsRows' -benchtime 20x
func BenchmarkAttentionSlotsRows(b *testing.B) {
	for _, seqs := range []int{1, 32} {
		b.Run(fmt.Sprintf("seqs=%d", seqs), func(b *testing.B) { benchAttentionSlotsRows(b, seqs) })
	}
}

// benchAttentionSlotsRows runs b.N decode steps of seqs one-token sequences.
func benchAttentionSlotsRows(b *testing.B, seqs int) {
	const layers, nh, hs, slot, past = 12, 12, 64, 1024, 161
	dev := NewCPU()
	r := rand.New(rand.NewPCG(3, 5))
	x := func(shape ...int) *Tensor {
		v := make([]float32, Shape(shape).Numel())
		for i := range v {
			v[i] = float32(2*r.Float64() - 1)
		}
		return FromSlice(dev, v, shape...)
	}
	cache := func() *Tensor { // [1, NH, slot, HS], the first past positions set
		t := Empty(dev, F32, 1, nh, slot, hs)
		v := raw[float32](t.Span())
		for h := range nh {
			for i := range past * hs {
				v[h*slot*hs+i] = float32(r.Int32N(1<<16)-1<<15) / (1 << 15)
			}
		}
		return t
	}
	q, out := x(1, seqs, nh, hs), Empty(dev, F32, 1, seqs, nh*hs)
	ks, vs := make([][]*Tensor, layers), make([][]*Tensor, layers)
	n := make([]int, seqs)
	for i := range n {
		n[i] = past
	}
	for l := range layers {
		for range seqs {
			ks[l], vs[l] = append(ks[l], cache()), append(vs[l], cache())
		}
	}
	o := AttentionOptions{Scale: 0.125, Causal: true}
	step := func() {
		for l := range layers {
			AttentionSlotsRows(out, q, ks[l], vs[l], n, o)
		}
	}
	step() // first touches
	b.ResetTimer()
	for range b.N {
		step()
	}
	bytes := float64(2 * layers * seqs * nh * past * hs * 4)
	b.ReportMetric(bytes*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
}
