package parallel

import (
	"context"

	"megago/tensor"
)

// StartRingShift begins passing xs one hop around the ring of c — rank r sends them to
// rank r+1 and receives the same shapes and dtypes from rank r−1 (mod the group size) —
// and returns a function that waits for the transfer and returns the received tensors,
// recorded as a differentiable function of xs. Between the two calls the transfer runs on
// its own goroutine, so it overlaps whatever the caller computes meanwhile (ring
// attention: block i+1 travels while block i's attention runs); xs must not be written
// until the wait returns.
//
// Forward: send to the next rank, receive from the previous; backward: send the gradients
// to the previous rank and receive those of the next, so the gradient of a block received
// k hops away goes back to its owner k hops in k backward shifts. Every rank of c must
// make the same sequence of shifts (and, in backward, of their gradients). On a group of
// size 1 the wait returns xs. A failed transfer panics with the *Error when waited for.
// tr, if not nil, records the forward transfer, from its start to its last receive, as an
// EventCPRing of ring step step.
func StartRingShift(ctx context.Context, c Comm, tr *Trace, step int, xs ...*tensor.Tensor) func() []*tensor.Tensor {
	if c.Size() == 1 {
		return func() []*tensor.Tensor { return xs }
	}
	recv := make([]*tensor.Tensor, len(xs))
	for i, x := range xs {
		recv[i] = tensor.Empty(x.Device(), x.DType(), x.Shape()...)
	}
	done := make(chan error, 1)
	start := tr.begin()
	go func() {
		err := ringShift(ctx, c, xs, recv, 1)
		tr.Record(start, EventCPRing, step, 0)
		done <- err
	}()
	return func() []*tensor.Tensor {
		return tensor.Apply("RingShift", &ringShiftFn{ctx: ctx, c: c, done: done, recv: recv}, xs...)
	}
}

// ringShiftFn is StartRingShift's differentiable function: its forward waits for the
// transfer already started.
type ringShiftFn struct {
	ctx  context.Context
	c    Comm
	done chan error
	recv []*tensor.Tensor
}

func (f *ringShiftFn) Forward([]*tensor.Tensor) []*tensor.Tensor {
	must(<-f.done)
	return f.recv
}

func (f *ringShiftFn) Backward(gs []*tensor.Tensor) []*tensor.Tensor {
	out := make([]*tensor.Tensor, len(gs))
	for i, g := range gs {
		out[i] = tensor.Empty(g.Device(), g.DType(), g.Shape()...)
	}
	must(ringShift(f.ctx, f.c, gs, out, -1))
	return out
}

// ringShift sends src to rank r+dir and receives dst from rank r−dir of c. Sends return
// without waiting for the receive in every transport, so all ranks sending first cannot
// deadlock.
func ringShift(ctx context.Context, c Comm, src, dst []*tensor.Tensor, dir int) error {
	n := c.Size()
	to, from := (c.Rank()+dir+n)%n, (c.Rank()-dir+n)%n
	for _, x := range src {
		if err := c.Send(ctx, x, to); err != nil {
			return err
		}
	}
	for _, y := range dst {
		if err := c.Recv(ctx, y, from); err != nil {
			return err
		}
	}
	return nil
}
