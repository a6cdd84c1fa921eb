package parallel

import (
	"context"
	"fmt"

	"megago/tensor"
)

// P2P carries a pipeline's point-to-point traffic: activations forward to the next stage
// and gradients backward to the previous one, as Megatron's p2p_communication does.
// Stages are the ranks of the PP group, in order, joined in a ring (the last stage's next
// is the first: an interleaved schedule passes one model chunk's output from the last
// stage to the next chunk on the first).
//
// Activations and gradients travel on two duplicates of the PP group, one per direction,
// so with two stages, where the previous and the next stage are the same rank, an
// activation is never taken for a gradient. Each message is preceded by a small shape
// header (rank, dtype and dims, as Megatron's variable_seq_lengths exchange), so stages
// agree on shapes that change from one micro-batch to the next; a P2P made with a fixed
// shape skips the headers.
//
// Received tensors are allocated on the P2P's device in the innermost open scope. The
// combined calls (SendForwardRecvBackward, ...) run their send concurrently with their
// receive, so two neighbours that both send before they receive cannot deadlock, whatever
// the transport's Send does. A P2P belongs to one rank and, apart from what the combined
// calls do internally, is used by one goroutine at a time.
type P2P struct {
	fwd, bwd Comm // PP duplicates: activations travel on fwd, gradients on bwd
	dev      *tensor.Device
	fixed    P2PShape // zero Shape: a header precedes each message
}

// P2PShape fixes the shape and dtype of every message, so no header is sent (Megatron's
// default when sequence lengths do not vary). The zero value means variable shapes.
type P2PShape struct {
	Shape tensor.Shape
	DType tensor.DType
}

// maxP2PDims bounds the rank of tensors a header can describe.
const maxP2PDims = 6

// NewP2P builds the point-to-point channels of the pipeline group pp (every rank of pp
// must call it: it splits pp twice). Messages are received into tensors on dev. fixed,
// if its Shape is set, is the shape and dtype of every message. It returns the split's
// error.
func NewP2P(ctx context.Context, pp Comm, dev *tensor.Device, fixed P2PShape) (*P2P, error) {
	if len(fixed.Shape) > 0 && fixed.DType == 0 {
		return nil, fmt.Errorf("parallel: NewP2P: fixed shape %v without a dtype", fixed.Shape)
	}
	p := &P2P{dev: dev, fixed: P2PShape{Shape: fixed.Shape.Clone(), DType: fixed.DType}}
	var err error
	if p.fwd, err = pp.Split(ctx, pp.Name()+"-p2p-fwd", 0, pp.Rank()); err != nil {
		return nil, fmt.Errorf("parallel: NewP2P: %w", err)
	}
	if p.bwd, err = pp.Split(ctx, pp.Name()+"-p2p-bwd", 0, pp.Rank()); err != nil {
		return nil, fmt.Errorf("parallel: NewP2P: %w", err)
	}
	return p, nil
}

// Stage returns this rank's stage (its rank in the PP group).
func (p *P2P) Stage() int { return p.fwd.Rank() }

// Stages returns the number of stages.
func (p *P2P) Stages() int { return p.fwd.Size() }

func (p *P2P) next() int { return (p.Stage() + 1) % p.Stages() }
func (p *P2P) prev() int { return (p.Stage() + p.Stages() - 1) % p.Stages() }

// SendForward sends the activation y to the next stage.
func (p *P2P) SendForward(ctx context.Context, y *tensor.Tensor) error {
	return p.send(ctx, p.fwd, y, p.next())
}

// RecvForward receives the previous stage's activation.
func (p *P2P) RecvForward(ctx context.Context) (*tensor.Tensor, error) {
	return p.recv(ctx, p.fwd, p.prev())
}

// SendBackward sends the gradient dx of this stage's input to the previous stage.
func (p *P2P) SendBackward(ctx context.Context, dx *tensor.Tensor) error {
	return p.send(ctx, p.bwd, dx, p.prev())
}

// RecvBackward receives the gradient of this stage's output from the next stage.
func (p *P2P) RecvBackward(ctx context.Context) (*tensor.Tensor, error) {
	return p.recv(ctx, p.bwd, p.next())
}

// SendForwardRecvBackward sends y to the next stage while receiving the gradient of this
// stage's output from it (the steady state of 1F1B after a forward step).
func (p *P2P) SendForwardRecvBackward(ctx context.Context, y *tensor.Tensor) (*tensor.Tensor, error) {
	return p.Exchange(ctx, Transfer{Send: y, SendDir: Forward, RecvDir: Backward})
}

// SendBackwardRecvForward sends dx to the previous stage while receiving the next
// activation from it (the steady state of 1F1B after a backward step).
func (p *P2P) SendBackwardRecvForward(ctx context.Context, dx *tensor.Tensor) (*tensor.Tensor, error) {
	return p.Exchange(ctx, Transfer{Send: dx, SendDir: Backward, RecvDir: Forward})
}

// Transfer is one combined call: an optional send and an optional receive. SendDir
// Forward sends Send to the next stage, Backward to the previous one; RecvDir Forward
// receives an activation from the previous stage, Backward a gradient from the next one.
// A zero direction (or a nil Send) means none.
type Transfer struct {
	Send    *tensor.Tensor
	SendDir Phase
	RecvDir Phase
}

// Exchange runs a Transfer: the send on a goroutine of its own, concurrently with the
// receive. It returns the received tensor (nil without a receive) once both are done,
// and the first error.
func (p *P2P) Exchange(ctx context.Context, tr Transfer) (*tensor.Tensor, error) {
	var sendErr chan error
	if tr.Send != nil && tr.SendDir != 0 {
		sendErr = make(chan error, 1)
		send := func() error { return p.SendForward(ctx, tr.Send) }
		if tr.SendDir == Backward {
			send = func() error { return p.SendBackward(ctx, tr.Send) }
		}
		if tr.RecvDir == 0 {
			return nil, send()
		}
		go func() { sendErr <- send() }()
	}
	var got *tensor.Tensor
	var err error
	switch tr.RecvDir {
	case Forward:
		got, err = p.RecvForward(ctx)
	case Backward:
		got, err = p.RecvBackward(ctx)
	}
	if sendErr != nil {
		if e := <-sendErr; err == nil {
			err = e
		}
	}
	return got, err
}

// send sends t's header (unless shapes are fixed) and elements to rank to of c.
func (p *P2P) send(ctx context.Context, c Comm, t *tensor.Tensor, to int) error {
	if len(p.fixed.Shape) > 0 {
		if !t.Shape().Equal(p.fixed.Shape) || t.DType() != p.fixed.DType {
			panic(fmt.Sprintf("parallel: P2P send: %v %v, but the P2P's fixed shape is %v %v", t.DType(), t.Shape(), p.fixed.DType, p.fixed.Shape))
		}
	} else {
		if t.Rank() > maxP2PDims {
			panic(fmt.Sprintf("parallel: P2P send: %v has more than %d dims", t.Shape(), maxP2PDims))
		}
		h := make([]int64, 2+maxP2PDims)
		h[0], h[1] = int64(t.Rank()), int64(t.DType())
		for i, d := range t.Shape() {
			h[2+i] = int64(d)
		}
		hdr := tensor.FromSlice(p.dev, h, len(h))
		err := c.Send(ctx, hdr, to)
		hdr.Release()
		if err != nil {
			return err
		}
	}
	return c.Send(ctx, t, to)
}

// recv receives a header (unless shapes are fixed) and then the tensor it describes.
func (p *P2P) recv(ctx context.Context, c Comm, from int) (*tensor.Tensor, error) {
	shape, dt := p.fixed.Shape, p.fixed.DType
	if len(shape) == 0 {
		hdr := tensor.Empty(p.dev, tensor.I64, 2+maxP2PDims)
		err := c.Recv(ctx, hdr, from)
		h := tensor.ToSlice[int64](hdr)
		hdr.Release()
		if err != nil {
			return nil, err
		}
		bad := h[0] < 0 || h[0] > maxP2PDims || h[1] < int64(tensor.F64) || h[1] > int64(tensor.I64)
		for i := 0; !bad && i < int(h[0]); i++ {
			bad = h[2+i] < 0
		}
		if bad {
			return nil, &Error{Op: "recv", Group: c.Name(), Rank: c.Rank(), Size: c.Size(), Peer: from,
				Err: fmt.Errorf("bad shape header %v", h)}
		}
		dt = tensor.DType(h[1])
		shape = make(tensor.Shape, h[0])
		for i := range shape {
			shape[i] = int(h[2+i])
		}
	}
	t := tensor.Empty(p.dev, dt, shape...)
	if err := c.Recv(ctx, t, from); err != nil {
		t.Release()
		return nil, err
	}
	return t, nil
}
