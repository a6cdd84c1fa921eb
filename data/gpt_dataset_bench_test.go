package data

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkGPTSample reads GPT samples in random order from a MemorySource of about 2M
// tokens.
func BenchmarkGPTSample(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	src := &MemorySource{}
	for range 2000 {
		seq := make([]int32, 1+r.IntN(2000))
		for i := range seq {
			seq[i] = int32(r.IntN(50000))
		}
		src.Seqs = append(src.Seqs, seq)
	}
	for _, s := range []int{128, 1024, 4096} {
		b.Run(fmt.Sprintf("seq=%d", s), func(b *testing.B) {
			ds, err := NewGPTDataset(context.Background(), src, SplitTrain, 0, GPTConfig{SeqLen: s, Split: "1", EOD: 0, EODMaskLoss: true})
			if err != nil {
				b.Fatal(err)
			}
			idx := make([]int, 1024)
			for i := range idx {
				idx[i] = r.IntN(ds.Len())
			}
			b.ResetTimer()
			n := 0
			for b.Loop() {
				ds.Sample(idx[n%len(idx)])
				n++
			}
			sec := b.Elapsed().Seconds()
			b.ReportMetric(float64(n)/sec, "samples/s")
			b.ReportMetric(float64(n*s)/sec, "tok/s")
		})
	}
}
