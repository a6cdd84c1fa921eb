package parallel

import (
	"context"
	"errors"
	"fmt"

	"megago/tensor"
)

// allToAllOp is the name errors give AllToAllV.
const allToAllOp = "all-to-all"

// CheckAllToAllV panics, naming the group, unless dst and src have the same dtype,
// sendCounts and recvCounts have one non-negative count per rank of c, and they sum to
// src's and dst's element counts: these are caller bugs. Transports call it first in
// AllToAllV.
func CheckAllToAllV(c Comm, dst, src *tensor.Tensor, sendCounts, recvCounts []int) {
	if dst.DType() != src.DType() {
		panic(fmt.Sprintf("parallel: AllToAllV on group %s: dst %v and src %v dtypes differ", c.Name(), dst.DType(), src.DType()))
	}
	for _, x := range []struct {
		what   string
		counts []int
		t      *tensor.Tensor
	}{{"send", sendCounts, src}, {"recv", recvCounts, dst}} {
		if len(x.counts) != c.Size() {
			panic(fmt.Sprintf("parallel: AllToAllV on group %s: %d %s counts for %d ranks", c.Name(), len(x.counts), x.what, c.Size()))
		}
		sum := 0
		for r, n := range x.counts {
			if n < 0 {
				panic(fmt.Sprintf("parallel: AllToAllV on group %s: %s count %d for rank %d", c.Name(), x.what, n, r))
			}
			sum += n
		}
		if sum != x.t.Numel() {
			panic(fmt.Sprintf("parallel: AllToAllV on group %s: %s counts %v sum to %d, tensor %v has %d elements", c.Name(), x.what, x.counts, sum, x.t.Shape(), x.t.Numel()))
		}
	}
}

// AllToAllVByP2P implements Comm.AllToAllV for c from its AllGather, Send and Recv, for
// transports whose Send returns without waiting for the matching Recv (all of megago's).
// It all-gathers every rank's send and receive counts (2·Size() int64s), so every rank
// checks every pair and all fail together, with the same error, when a receive count
// differs from its sender's send count. Then it sends each peer its run of src, starting
// with the next rank, receives each peer's run into dst, and copies its own run. It
// panics as CheckAllToAllV does.
func AllToAllVByP2P(ctx context.Context, c Comm, dst, src *tensor.Tensor, sendCounts, recvCounts []int) error {
	CheckAllToAllV(c, dst, src, sendCounts, recvCounts)
	n, me := c.Size(), c.Rank()
	flatDst, flatSrc := dst.Reshape(-1), src.Reshape(-1) // [Σ recvCounts], [Σ sendCounts]
	sendOff, recvOff := offsets(sendCounts), offsets(recvCounts)
	if n > 1 {
		if err := CheckAllToAllCounts(ctx, c, sendCounts, recvCounts); err != nil {
			return err
		}
		for k := 1; k < n; k++ {
			to := (me + k) % n
			if sendCounts[to] > 0 {
				if err := c.Send(ctx, flatSrc.Narrow(0, sendOff[to], sendCounts[to]), to); err != nil {
					return asAllToAll(c, err)
				}
			}
		}
		for k := 1; k < n; k++ {
			from := (me - k + n) % n
			if recvCounts[from] > 0 {
				if err := c.Recv(ctx, flatDst.Narrow(0, recvOff[from], recvCounts[from]), from); err != nil {
					return asAllToAll(c, err)
				}
			}
		}
	}
	if recvCounts[me] != sendCounts[me] {
		return &Error{Op: allToAllOp, Group: c.Name(), Rank: me, Size: n, Peer: -1,
			Err: fmt.Errorf("mismatched counts: rank %d receives %d elements from itself but sends %d", me, recvCounts[me], sendCounts[me])}
	}
	flatDst.Narrow(0, recvOff[me], recvCounts[me]).CopyFrom(flatSrc.Narrow(0, sendOff[me], sendCounts[me]))
	return nil
}

// offsets returns the start of each rank's run: the prefix sums of counts.
func offsets(counts []int) []int {
	off := make([]int, len(counts))
	for r := 1; r < len(counts); r++ {
		off[r] = off[r-1] + counts[r-1]
	}
	return off
}

// CheckAllToAllCounts all-gathers every rank's send and receive counts of an AllToAllV
// (2·Size() int64s, on the host) and returns an error, the same on every rank, naming the
// first sender and receiver whose counts differ. Transports call it before moving data.
func CheckAllToAllCounts(ctx context.Context, c Comm, sendCounts, recvCounts []int) error {
	n := c.Size()
	mine := make([]int64, 2*n)
	for r := range n {
		mine[r], mine[n+r] = int64(sendCounts[r]), int64(recvCounts[r])
	}
	all := tensor.Zeros(tensor.NewCPU(), tensor.I64, n, 2*n) // rank s: sends to r at [s, r], receives from r at [s, n+r]
	if err := c.AllGather(ctx, all, tensor.FromSlice(tensor.NewCPU(), mine, 1, 2*n)); err != nil {
		return asAllToAll(c, err)
	}
	m := tensor.ToSlice[int64](all)
	for s := range n {
		for r := range n {
			if sent, got := m[s*2*n+r], m[r*2*n+n+s]; sent != got {
				return &Error{Op: allToAllOp, Group: c.Name(), Rank: c.Rank(), Size: n, Peer: -1,
					Err: fmt.Errorf("mismatched counts: rank %d sends %d elements to rank %d, which expects %d", s, sent, r, got)}
			}
		}
	}
	return nil
}

// asAllToAll renames the *Error of a step of AllToAllV after it.
func asAllToAll(c Comm, err error) error {
	var e *Error
	if errors.As(err, &e) {
		return &Error{Op: allToAllOp, Group: e.Group, Rank: e.Rank, Size: e.Size, Peer: e.Peer, Err: e.Err}
	}
	return &Error{Op: allToAllOp, Group: c.Name(), Rank: c.Rank(), Size: c.Size(), Peer: -1, Err: err}
}
