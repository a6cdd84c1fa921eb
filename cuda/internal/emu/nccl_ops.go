package emu

import (
	"context"
	"errors"
	"fmt"

	"megago/cuda/internal/driver"
	"megago/cuda/internal/nccl"
	"megago/parallel"
	"megago/tensor"
)

// The emulated NCCL's data calls: each copies its input from the emulator's memory into
// a host tensor, makes the in-process transport's call and copies the result back. The
// stream arguments are ignored (every call completes before it returns).

// dtype returns the tensor dtype of NCCL data type dt.
func dtype(dt int32) (tensor.DType, error) {
	switch dt {
	case nccl.Float64:
		return tensor.F64, nil
	case nccl.Float32:
		return tensor.F32, nil
	case nccl.Bfloat16:
		return tensor.BF16, nil
	case nccl.Float16:
		return tensor.F16, nil
	case nccl.Int32:
		return tensor.I32, nil
	case nccl.Int64:
		return tensor.I64, nil
	}
	return 0, fmt.Errorf("emulated NCCL: data type %d is not emulated", dt)
}

// reduction returns the parallel.Op of NCCL reduction op.
func reduction(op int32) (parallel.Op, error) {
	switch op {
	case nccl.Sum:
		return parallel.Sum, nil
	case nccl.Max:
		return parallel.Max, nil
	case nccl.Min:
		return parallel.Min, nil
	case nccl.Avg:
		return parallel.Avg, nil
	}
	return 0, fmt.Errorf("emulated NCCL: reduction %d is not emulated", op)
}

// host returns a host tensor of count elements of dt holding the bytes at p (zeros for
// p == 0).
func (e *NCCL) host(dt int32, count int, p driver.DevicePtr) (*tensor.Tensor, error) {
	d, err := dtype(dt)
	if err != nil {
		return nil, err
	}
	t := tensor.Zeros(tensor.NewCPU(), d, count)
	if p != 0 && count > 0 {
		e.d.DtoH(t.HostBytes(), p)
	}
	return t, nil
}

// store copies t's bytes to p.
func (e *NCCL) store(p driver.DevicePtr, t *tensor.Tensor) {
	if t.Numel() > 0 {
		e.d.HtoD(p, t.HostBytes())
	}
}

// callErr returns the transport's error as the emulated NCCL's: the cause and the peer,
// without the transport's group and rank, which the caller adds.
func callErr(err error) error {
	var pe *parallel.Error
	if !errors.As(err, &pe) {
		return err
	}
	if pe.Peer >= 0 {
		return fmt.Errorf("emulated NCCL: peer %d: %w", pe.Peer, pe.Err)
	}
	return fmt.Errorf("emulated NCCL: %w", pe.Err)
}

// do runs f, one call on h's communicator, and stores the host tensor it returns (none
// for Send) at dst.
func (e *NCCL) do(h nccl.Handle, dst driver.DevicePtr, f func(c parallel.Comm) (*tensor.Tensor, error)) error {
	c, err := comm(h)
	if err != nil {
		return err
	}
	t, err := f(c.c)
	if err != nil {
		return callErr(err)
	}
	if t != nil {
		e.store(dst, t)
	}
	return nil
}

// AllReduce reduces count elements of send over the ranks into recv.
func (e *NCCL) AllReduce(ctx context.Context, send, recv driver.DevicePtr, count int, dt, op int32, h nccl.Handle, _ driver.Stream) error {
	return e.do(h, recv, func(c parallel.Comm) (*tensor.Tensor, error) {
		o, err := reduction(op)
		if err != nil {
			return nil, err
		}
		t, err := e.host(dt, count, send)
		if err != nil {
			return nil, err
		}
		return t, c.AllReduce(ctx, t, o)
	})
}

// Broadcast sets count elements of recv on every rank to root's send.
func (e *NCCL) Broadcast(ctx context.Context, send, recv driver.DevicePtr, count int, dt int32, root int, h nccl.Handle, _ driver.Stream) error {
	return e.do(h, recv, func(c parallel.Comm) (*tensor.Tensor, error) {
		t, err := e.host(dt, count, send)
		if err != nil {
			return nil, err
		}
		return t, c.Broadcast(ctx, t, root)
	})
}

// ReduceScatter reduces send (recvCount elements per rank) over the ranks and sets recv
// to this rank's part.
func (e *NCCL) ReduceScatter(ctx context.Context, send, recv driver.DevicePtr, recvCount int, dt, op int32, h nccl.Handle, _ driver.Stream) error {
	return e.do(h, recv, func(c parallel.Comm) (*tensor.Tensor, error) {
		o, err := reduction(op)
		if err != nil {
			return nil, err
		}
		src, err := e.host(dt, recvCount*c.Size(), send)
		if err != nil {
			return nil, err
		}
		dst, _ := e.host(dt, recvCount, 0)
		return dst, c.ReduceScatter(ctx, dst, src, o)
	})
}

// AllGather sets recv to every rank's sendCount elements of send, in rank order.
func (e *NCCL) AllGather(ctx context.Context, send, recv driver.DevicePtr, sendCount int, dt int32, h nccl.Handle, _ driver.Stream) error {
	return e.do(h, recv, func(c parallel.Comm) (*tensor.Tensor, error) {
		src, err := e.host(dt, sendCount, send)
		if err != nil {
			return nil, err
		}
		dst, _ := e.host(dt, sendCount*c.Size(), 0)
		return dst, c.AllGather(ctx, dst, src)
	})
}

// Send queues count elements of buf for rank peer and returns.
func (e *NCCL) Send(ctx context.Context, buf driver.DevicePtr, count int, dt int32, peer int, h nccl.Handle, _ driver.Stream) error {
	return e.do(h, 0, func(c parallel.Comm) (*tensor.Tensor, error) {
		t, err := e.host(dt, count, buf)
		if err != nil {
			return nil, err
		}
		return nil, c.Send(ctx, t, peer)
	})
}

// Recv receives count elements from rank peer into buf.
func (e *NCCL) Recv(ctx context.Context, buf driver.DevicePtr, count int, dt int32, peer int, h nccl.Handle, _ driver.Stream) error {
	return e.do(h, buf, func(c parallel.Comm) (*tensor.Tensor, error) {
		t, err := e.host(dt, count, 0)
		if err != nil {
			return nil, err
		}
		return t, c.Recv(ctx, t, peer)
	})
}

// GroupStart begins a group of calls; the emulator needs no group: its Send does not wait
// for its Recv, so a group that issues its sends before its receives completes call by call.
func (e *NCCL) GroupStart() error { return nil }

// GroupEnd ends a group of calls (see GroupStart).
func (e *NCCL) GroupEnd() error { return nil }
