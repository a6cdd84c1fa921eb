package commtest

import (
	"fmt"
	"testing"
)

// BenchSizes are the message sizes of the all-reduce benchmarks, in bytes.
var BenchSizes = []int{1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 32 << 20, 64 << 20}

// BenchRanks is the group size of the all-reduce benchmarks.
const BenchRanks = 2

// SizeName names a sub-benchmark after its message size: "4KB", "16MB".
func SizeName(n int) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%dMB", n>>20)
	}
	return fmt.Sprintf("%dKB", n>>10)
}

// ReportBusBandwidth reports GB/s (10⁹ bytes a second) of bus bandwidth for an
// all-reduce of size bytes over n ranks done b.N times: 2(n−1)/n · size / t, as
// nccl-tests define it (a ring all-reduce sends and receives that much on every rank,
// so bus bandwidth is the rate of each link of the ring); with n = 1 (a plain copy),
// size / t.
func ReportBusBandwidth(b *testing.B, n, size int) {
	factor := 1.0
	if n > 1 {
		factor = 2 * float64(n-1) / float64(n)
	}
	b.ReportMetric(factor*float64(size)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
}
