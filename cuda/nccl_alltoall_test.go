package cuda

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"megago/parallel"
	"megago/tensor"
)

// checkAllToAllV checks AllToAllV on c against its definition, with uneven and zero
// counts in F32, BF16 and I32, and that a receive count differing from its sender's send
// count fails on every rank. Rank s sends rank r (s+2r+k)%3 elements, element i being
// 10s+3r+i (exact in bfloat16).
func checkAllToAllV(ctx context.Context, c parallel.Comm, dev *tensor.Device) error {
	n, me := c.Size(), c.Rank()
	count := func(k, s, r int) int { return (s + 2*r + k) % 3 }
	run := func(k, s, r int) []float64 {
		v := make([]float64, count(k, s, r))
		for i := range v {
			v[i] = float64(10*s + 3*r + i)
		}
		return v
	}
	for k, dt := range []tensor.DType{tensor.F32, tensor.BF16, tensor.I32} {
		send, recv := make([]int, n), make([]int, n)
		var vals, want []float64
		for r := range n {
			send[r], recv[r] = count(k, me, r), count(k, r, me)
			vals, want = append(vals, run(k, me, r)...), append(want, run(k, r, me)...)
		}
		src := tensor.FromSlice(dev, vals, len(vals)).Cast(dt)
		dst := tensor.Zeros(dev, dt, len(want))
		if err := c.AllToAllV(ctx, dst, src, send, recv); err != nil {
			return err
		}
		if got := values(dst); !slices.Equal(got, want) {
			return fmt.Errorf("rank %d: all-to-all %v, send %v recv %v: got %v, want %v", me, dt, send, recv, got, want)
		}
	}
	ones := slices.Repeat([]int{1}, n)
	recv := slices.Clone(ones)
	if me == n-1 {
		recv[0] = 2
	}
	err := c.AllToAllV(ctx, tensor.Zeros(dev, tensor.F32, n+boolToInt(me == n-1)), tensor.Zeros(dev, tensor.F32, n), ones, recv)
	var pe *parallel.Error
	if !errors.As(err, &pe) || pe.Op != "all-to-all" || !strings.Contains(err.Error(), "mismatched counts") {
		return fmt.Errorf("rank %d: all-to-all with mismatched counts: got %v", me, err)
	}
	return nil
}

func boolToInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
