package parallel

import (
	"context"
	"fmt"

	"megago/tensor"
)

// Op is a reduction applied element by element across the ranks of a group.
type Op uint8

// Reductions.
const (
	Sum Op = iota + 1
	Max
	Min
	Avg // the sum divided by the group size (integer division for integer dtypes)
)

func (o Op) String() string {
	switch o {
	case Sum:
		return "sum"
	case Max:
		return "max"
	case Min:
		return "min"
	case Avg:
		return "avg"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// Comm is a group of ranks that communicate: the world, or a sub-group such as one TP
// group. Ranks are numbered 0..Size()-1 within the group. Every collective must be called
// by every rank of the group, in the same order, with tensors of the same dtype and sizes;
// a mismatch is reported as an error where the transport can detect it. Collectives on a
// group of size 1 return at once, leaving their tensors as they are (AllGather,
// ReduceScatter and AllToAllV copy src to dst).
//
// Tensors may live on any device; transports that move host bytes read and write them
// through the device's backend. Blocking calls return an *Error when the context ends,
// a peer fails or the job is aborted.
type Comm interface {
	// Rank returns this rank's index in the group.
	Rank() int
	// Size returns the number of ranks in the group.
	Size() int
	// Name returns the group's name ("world", "tp", "dp", ...), used in errors.
	Name() string
	// WorldRank returns the world rank of the group's rank r.
	WorldRank(r int) int

	// AllReduce replaces t, on every rank, with the element-wise reduction of t over the
	// group's ranks.
	AllReduce(ctx context.Context, t *tensor.Tensor, op Op) error
	// AllGather sets dst to the concatenation of every rank's src, in rank order: dst holds
	// Size() times src's elements, rank r's at [r·n, (r+1)·n) in row-major order (for
	// shapes, dim 0 of dst is Size() times dim 0 of src).
	AllGather(ctx context.Context, dst, src *tensor.Tensor) error
	// ReduceScatter reduces src over the ranks and sets dst to rank r's part: elements
	// [r·n, (r+1)·n) of the reduced src, where n is dst's element count.
	ReduceScatter(ctx context.Context, dst, src *tensor.Tensor, op Op) error
	// AllToAllV sends sendCounts[r] elements of src to rank r and receives recvCounts[r]
	// elements from rank r into dst: the runs are contiguous in row-major order and in
	// rank order, so rank r's run of src starts at the sum of sendCounts[:r], and likewise
	// in dst. recvCounts[r] must equal rank r's sendCounts[Rank()]: the counts are
	// exchanged first and checked on every rank, and a mismatch is an error naming the
	// ranks and counts, returned by every rank. Counts may be zero and differ from rank to
	// rank. It panics if dst and src dtypes differ, a count is negative, there is not one
	// count per rank, or the counts do not sum to the tensors' element counts.
	AllToAllV(ctx context.Context, dst, src *tensor.Tensor, sendCounts, recvCounts []int) error
	// Broadcast sets t on every rank to root's t.
	Broadcast(ctx context.Context, t *tensor.Tensor, root int) error
	// Send sends t's elements to rank to, which must Recv them in the same order.
	Send(ctx context.Context, t *tensor.Tensor, to int) error
	// Recv receives into t elements sent by rank from; t must match the sent dtype and
	// element count.
	Recv(ctx context.Context, t *tensor.Tensor, from int) error
	// Barrier returns once every rank of the group has called it.
	Barrier(ctx context.Context) error
	// Split partitions the group: ranks that pass the same color form a new group named
	// name, ordered by key and then by rank. Every rank must call it; a rank that passes a
	// negative color joins no group and gets nil.
	Split(ctx context.Context, name string, color, key int) (Comm, error)
}

// Error is what a failed communication returns: the collective, the group and the rank,
// and the peer at fault when known, e.g.
// "parallel: all-reduce on group tp rank 3 of 4: peer 1: connection reset".
type Error struct {
	Op    string // "all-reduce", "send", ...
	Group string
	Rank  int
	Size  int
	Peer  int // rank in the group at fault, or -1
	Err   error
}

func (e *Error) Error() string {
	s := fmt.Sprintf("parallel: %s on group %s rank %d of %d", e.Op, e.Group, e.Rank, e.Size)
	if e.Peer >= 0 {
		s += fmt.Sprintf(": peer %d", e.Peer)
	}
	return s + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }
