package parallel_test

import (
	"context"
	"sync"
	"testing"

	"megago/parallel"
	"megago/parallel/internal/commtest"
	"megago/tensor"
)

// BenchmarkAllReduce measures a float32 sum all-reduce over 2 goroutine ranks on the
// in-process transport, reporting bus bandwidth in GB/s (see
// commtest.ReportBusBandwidth), timed after one untimed warm-up call. The TCP transport's
// BenchmarkAllReduce, in parallel/tcp, has the same sizes and metric.
//
//	go test -run XXX -bench AllReduce ./parallel/...
func BenchmarkAllReduce(b *testing.B) {
	b.Run("local", func(b *testing.B) {
		for _, size := range commtest.BenchSizes {
			b.Run(commtest.SizeName(size), func(b *testing.B) {
				var start sync.WaitGroup
				start.Add(commtest.BenchRanks)
				err := parallel.RunLocal(commtest.BenchRanks, func(c parallel.Comm) error {
					x := tensor.Zeros(tensor.NewCPU(), tensor.F32, size/4)
					if err := c.AllReduce(context.Background(), x, parallel.Sum); err != nil { // warm-up
						return err
					}
					start.Done()
					start.Wait()
					if c.Rank() == 0 {
						b.ResetTimer()
					}
					for range b.N {
						if err := c.AllReduce(context.Background(), x, parallel.Sum); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
				commtest.ReportBusBandwidth(b, commtest.BenchRanks, size)
			})
		}
	})
}
