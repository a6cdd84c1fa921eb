package tcp

import (
	"context"
	"fmt"
	"testing"

	"megago/internal/testutil"
	"megago/parallel"
	"megago/parallel/internal/commtest"
	"megago/tensor"
)

// TestTCPInPlace checks the collectives where the tensors share storage, as the
// distributed optimizer calls them: AllGather from this rank's slice of the destination,
// ReduceScatter into this rank's slice of the source, and AllReduce, which sends from its
// tensor and receives into it. The TCP ring reads and writes host tensors in place, so
// the order of those reads and writes matters; 13 elements a rank and 8-byte segments
// make every chunk several segments long. The expected values are commtest.Reduce's.
func TestTCPInPlace(t *testing.T) {
	const m = 13
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("%d-ranks", n), func(t *testing.T) {
			testutil.ForEachBackend(t, func(t *testing.T, dev *tensor.Device) {
				err := tcpRun(t, n, func(cfg *Config) { cfg.SegmentBytes = 8 }, func(c parallel.Comm) error {
					d, err := tensor.Open(dev.String())
					if err != nil {
						return err
					}
					return checkInPlace(context.Background(), c, d, m)
				})
				if err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}

func checkInPlace(ctx context.Context, c parallel.Comm, dev *tensor.Device, m int) error {
	n, r := c.Size(), c.Rank()
	const k = 5 // commtest.Value's case number
	for _, dt := range []tensor.DType{tensor.F32, tensor.BF16} {
		full := commtest.Tensor(dev, dt, commtest.Values(k, r, n*m), n*m)
		if err := c.AllGather(ctx, full, full.Narrow(0, r*m, m)); err != nil {
			return err
		}
		var want []float64
		for q := range n {
			want = append(want, commtest.Values(k, q, n*m)[q*m:(q+1)*m]...)
		}
		if err := commtest.Check(fmt.Sprintf("rank %d: in-place all-gather of %v", r, dt), full, want); err != nil {
			return err
		}

		for _, op := range []parallel.Op{parallel.Sum, parallel.Avg} {
			src := commtest.Tensor(dev, dt, commtest.Values(k, r, n*m), n*m)
			if err := c.ReduceScatter(ctx, src.Narrow(0, r*m, m), src, op); err != nil {
				return err
			}
			want := commtest.Values(k, r, n*m) // other ranks' chunks are left as they were
			for i := r * m; i < (r+1)*m; i++ {
				want[i] = commtest.Reduce(dt, op, k, n, i)
			}
			if err := commtest.Check(fmt.Sprintf("rank %d: in-place reduce-scatter %v of %v", r, op, dt), src, want); err != nil {
				return err
			}

			x := commtest.Tensor(dev, dt, commtest.Values(k, r, n*m), n*m)
			if err := c.AllReduce(ctx, x, op); err != nil {
				return err
			}
			for i := range want {
				want[i] = commtest.Reduce(dt, op, k, n, i)
			}
			if err := commtest.Check(fmt.Sprintf("rank %d: all-reduce %v of %v", r, op, dt), x, want); err != nil {
				return err
			}
		}
	}
	return nil
}
