package commtest

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"megago/parallel"
	"megago/tensor"
)

// AllToAllCount is how many elements rank s sends rank r in AllToAllV case k: uneven,
// and zero for some pairs (and, in case 0 with 2 ranks, for all of one rank's sends).
func AllToAllCount(k, s, r int) int {
	return (s + 2*r + k) % 4 * (1 + k%3)
}

// AllToAllRun is what rank s sends rank r in case k: element i is Value(k+r, s, i).
func AllToAllRun(k, s, r int) []float64 { return Values(k+r, s, AllToAllCount(k, s, r)) }

// AllToAllCounts returns rank me's send and receive counts over n ranks in case k.
func AllToAllCounts(k, me, n int) (send, recv []int) {
	send, recv = make([]int, n), make([]int, n)
	for r := range n {
		send[r], recv[r] = AllToAllCount(k, me, r), AllToAllCount(k, r, me)
	}
	return send, recv
}

// checkAllToAllV checks AllToAllV with uneven and zero counts in several dtypes, then
// that receive counts differing from the senders' fail on every rank and leave c usable.
func checkAllToAllV(ctx context.Context, c parallel.Comm, dev *tensor.Device) error {
	n, me := c.Size(), c.Rank()
	for k, dt := range []tensor.DType{tensor.F32, tensor.BF16, tensor.I32, tensor.F64, tensor.F32} {
		send, recv := AllToAllCounts(k, me, n)
		var vals, want []float64
		for r := range n {
			vals = append(vals, AllToAllRun(k, me, r)...)
			want = append(want, AllToAllRun(k, r, me)...)
		}
		src := Tensor(dev, dt, vals, len(vals))
		dst := tensor.Zeros(dev, dt, len(want))
		if err := c.AllToAllV(ctx, dst, src, send, recv); err != nil {
			return err
		}
		if err := Check(fmt.Sprintf("rank %d: all-to-all %d of %v, send %v recv %v", me, k, dt, send, recv), dst, want); err != nil {
			return err
		}
	}
	return checkAllToAllVMismatch(ctx, c, dev)
}

// checkAllToAllVMismatch has the last rank expect one element more from rank 0 than
// rank 0 sends it: every rank must fail naming both.
func checkAllToAllVMismatch(ctx context.Context, c parallel.Comm, dev *tensor.Device) error {
	n, me := c.Size(), c.Rank()
	send, recv := make([]int, n), make([]int, n)
	for r := range n {
		send[r], recv[r] = 1, 1
	}
	if me == n-1 {
		recv[0]++
	}
	src, dst := tensor.Zeros(dev, tensor.F32, n), tensor.Zeros(dev, tensor.F32, n+boolInt(me == n-1))
	err := c.AllToAllV(ctx, dst, src, send, recv)
	var pe *parallel.Error
	wantMsg := fmt.Sprintf("rank 0 sends 1 elements to rank %d, which expects 2", n-1)
	if n == 1 {
		wantMsg = "rank 0 receives 2 elements from itself but sends 1"
	}
	if !errors.As(err, &pe) || pe.Op != "all-to-all" || pe.Rank != me || !strings.Contains(err.Error(), wantMsg) {
		return fmt.Errorf("rank %d: all-to-all with mismatched counts: got error %v, want an all-to-all *parallel.Error with %q", me, err, wantMsg)
	}
	return nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
