package parallel

import (
	"context"

	"megago/tensor"
)

// Ring passes tensors one hop around the ring of a group: rank r sends to rank r+1 and
// receives from rank r−1 (mod the group size). Each Shift runs on its own goroutine, so it
// overlaps whatever the caller computes until it waits for it, and starts only when the
// shift started before it has finished, so several shifts in flight (ring attention's
// backward passes key/value blocks and their gradients) reach every rank in the order they
// were started. Every rank of the group must start the same sequence of shifts, of the same
// shapes and dtypes. A Ring is used by one goroutine.
type Ring struct {
	ctx  context.Context
	c    Comm
	tr   *Trace
	last chan struct{} // closed when the last shift started has finished; nil: none
}

// NewRing returns a Ring over c. tr, if not nil, records each shift's transfer.
func NewRing(ctx context.Context, c Comm, tr *Trace) *Ring { return &Ring{ctx: ctx, c: c, tr: tr} }

// Shift begins passing xs one hop around the ring, after the shifts started before it, and
// returns a function that waits for the transfer and returns the received tensors (fresh
// tensors of xs's shapes and dtypes; no autograd). xs must not be written until the wait
// returns. On a group of size 1 the wait returns xs. A failed transfer panics with the
// *Error when waited for. The transfer, from the call (which includes any wait for the
// shift before it) to its last receive, is recorded as an event of kind at ring step step.
func (r *Ring) Shift(kind EventKind, step int, xs ...*tensor.Tensor) func() []*tensor.Tensor {
	if r.c.Size() == 1 {
		return func() []*tensor.Tensor { return xs }
	}
	recv := make([]*tensor.Tensor, len(xs))
	for i, x := range xs {
		recv[i] = tensor.Empty(x.Device(), x.DType(), x.Shape()...)
	}
	prev, done := r.last, make(chan struct{})
	r.last = done
	var err error
	start := r.tr.begin()
	go func() {
		defer close(done)
		if prev != nil {
			<-prev
		}
		err = ringShift(r.ctx, r.c, xs, recv, 1)
		r.tr.Record(start, kind, step, 0)
	}()
	return func() []*tensor.Tensor {
		<-done
		must(err)
		return recv
	}
}

// StartRingShift begins passing xs one hop around the ring of c (Ring.Shift, recorded as
// an EventCPRing of ring step step) and returns a function that waits for the transfer and
// returns the received tensors, recorded as a differentiable function of xs.
//
// Forward: send to the next rank, receive from the previous; backward: send the gradients
// to the previous rank and receive those of the next, so the gradient of a block received
// k hops away goes back to its owner k hops in k backward shifts. Every rank of c must
// make the same sequence of shifts (and, in backward, of their gradients). On a group of
// size 1 the wait returns xs.
func StartRingShift(ctx context.Context, c Comm, tr *Trace, step int, xs ...*tensor.Tensor) func() []*tensor.Tensor {
	if c.Size() == 1 {
		return func() []*tensor.Tensor { return xs }
	}
	wait := NewRing(ctx, c, tr).Shift(EventCPRing, step, xs...)
	return func() []*tensor.Tensor {
		return tensor.Apply("RingShift", &ringShiftFn{ctx: ctx, c: c, wait: wait}, xs...)
	}
}

// ringShiftFn is StartRingShift's differentiable function: its forward waits for the
// transfer already started.
type ringShiftFn struct {
	ctx  context.Context
	c    Comm
	wait func() []*tensor.Tensor
}

func (f *ringShiftFn) Forward([]*tensor.Tensor) []*tensor.Tensor { return f.wait() }

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
