package tensor

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkAttentionSlotsRows times the attention of a decode step of one-token
// sequences (AttentionSlotsRows) at GPT-2 124M's shape: 12 layers of 12 heads of 64, each
// sequence over the first 161 positions of its own slots [1, 12, L, 64], one op per layer.
// L is 161 (the slots of serve21's profiling harness: a sequence's heads one after
// another) or 1024 (megago serve's at GPT-2's 1024 positions: each head's keys alone in
// 256 KiB). An op is a whole step (12 layers, so that each layer's caches come from memory
// as in a serving step, where the weights' products evict them); GB/s counts the keys and
// values read. At L = 1024 and 32 sequences it allocates 2.4 GB.
//
//	go test ./tensor -run '^$' -bench 'AttentionSlotsRows' -benchtime 30x
func BenchmarkAttentionSlotsRows(b *testing.B) {
	for _, seqs := range []int{1, 32} {
		for _, slot := range []int{161, 1024} {
			b.Run(fmt.Sprintf("seqs=%d/L=%d", seqs, slot), func(b *testing.B) { benchAttentionSlotsRows(b, seqs, slot) })
		}
	}
}

// benchAttentionSlotsRows runs b.N decode steps of seqs one-token sequences over slots of
// slot positions.
func benchAttentionSlotsRows(b *testing.B, seqs, slot int) {
	const layers, nh, hs, past = 12, 12, 64, 161
	dev := NewCPU()
	r := rand.New(rand.NewPCG(3, 5))
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
	q := Empty(dev, F32, 1, seqs, nh, hs)
	for i := range raw[float32](q.Span()) {
		raw[float32](q.Span())[i] = float32(r.Float64()*2 - 1)
	}
	out := Empty(dev, F32, 1, seqs, nh*hs)
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
