package cuda

import (
	"context"
	"errors"

	"megago/cuda/internal/driver"
	"megago/cuda/internal/nccl"
)

// ncclAPI is the collective library a Comm calls: libnccl on a real device (realNCCL),
// the emulator's in-process NCCL on the emulator (emu.NCCL). The calls are libnccl's,
// queued on stream s, plus the context of the Comm call that makes them, which only
// calls that complete before they return (the emulator's) can watch.
type ncclAPI interface {
	NewUniqueID() (nccl.UniqueID, error)
	InitRank(ctx context.Context, id nccl.UniqueID, nranks, rank int) (nccl.Handle, error)
	Destroy(c nccl.Handle) error
	Abort(c nccl.Handle) error
	AsyncError(c nccl.Handle) error
	AllReduce(ctx context.Context, send, recv driver.DevicePtr, count int, dt, op int32, c nccl.Handle, s driver.Stream) error
	Broadcast(ctx context.Context, send, recv driver.DevicePtr, count int, dt int32, root int, c nccl.Handle, s driver.Stream) error
	ReduceScatter(ctx context.Context, send, recv driver.DevicePtr, recvCount int, dt, op int32, c nccl.Handle, s driver.Stream) error
	AllGather(ctx context.Context, send, recv driver.DevicePtr, sendCount int, dt int32, c nccl.Handle, s driver.Stream) error
	Send(ctx context.Context, buf driver.DevicePtr, count int, dt int32, peer int, c nccl.Handle, s driver.Stream) error
	Recv(ctx context.Context, buf driver.DevicePtr, count int, dt int32, peer int, c nccl.Handle, s driver.Stream) error
	GroupStart() error
	GroupEnd() error
}

// ncclDevice is what a Comm needs from the device under its Backend besides the gpu
// interface: its collective library, the stream the Backend queues its work on, a second
// stream for sends, and events to order and watch the streams. On the emulator every
// call completes before it returns, so its streams and events are placeholders whose
// events are always reached.
type ncclDevice interface {
	gpu
	loadNCCL(env SearchEnv) (ncclAPI, error)
	mainStream() driver.Stream
	newStream() (driver.Stream, error)
	syncStream(s driver.Stream) error
	destroyStream(s driver.Stream) error
	newEvent() (driver.Event, error)
	destroyEvent(e driver.Event) error
	record(e driver.Event, s driver.Stream) error
	waitEvent(s driver.Stream, e driver.Event) error
	reached(e driver.Event) (bool, error)
}

// loadNCCL returns the Backend's collective library: NCCL on first use for a device
// that has one.
func loadNCCL(dev gpu, env SearchEnv) (ncclAPI, error) {
	d, ok := dev.(ncclDevice)
	if !ok {
		return nil, errors.New("cuda: NCCL needs a backend on a real device or the emulator")
	}
	return d.loadNCCL(env)
}

// realNCCL is libnccl as an ncclAPI: its calls are queued on streams and return at once,
// so they ignore the context (Comm's wait watches it).
type realNCCL struct{ l *nccl.Lib }

func (n realNCCL) NewUniqueID() (nccl.UniqueID, error) { return n.l.NewUniqueID() }
func (n realNCCL) InitRank(_ context.Context, id nccl.UniqueID, nranks, rank int) (nccl.Handle, error) {
	return n.l.InitRank(id, nranks, rank)
}
func (n realNCCL) Destroy(c nccl.Handle) error    { return n.l.Destroy(c) }
func (n realNCCL) Abort(c nccl.Handle) error      { return n.l.Abort(c) }
func (n realNCCL) AsyncError(c nccl.Handle) error { return n.l.AsyncError(c) }
func (n realNCCL) AllReduce(_ context.Context, send, recv driver.DevicePtr, count int, dt, op int32, c nccl.Handle, s driver.Stream) error {
	return n.l.AllReduce(send, recv, count, dt, op, c, s)
}
func (n realNCCL) Broadcast(_ context.Context, send, recv driver.DevicePtr, count int, dt int32, root int, c nccl.Handle, s driver.Stream) error {
	return n.l.Broadcast(send, recv, count, dt, root, c, s)
}
func (n realNCCL) ReduceScatter(_ context.Context, send, recv driver.DevicePtr, recvCount int, dt, op int32, c nccl.Handle, s driver.Stream) error {
	return n.l.ReduceScatter(send, recv, recvCount, dt, op, c, s)
}
func (n realNCCL) AllGather(_ context.Context, send, recv driver.DevicePtr, sendCount int, dt int32, c nccl.Handle, s driver.Stream) error {
	return n.l.AllGather(send, recv, sendCount, dt, c, s)
}
func (n realNCCL) Send(_ context.Context, buf driver.DevicePtr, count int, dt int32, peer int, c nccl.Handle, s driver.Stream) error {
	return n.l.Send(buf, count, dt, peer, c, s)
}
func (n realNCCL) GroupStart() error { return n.l.GroupStart() }
func (n realNCCL) GroupEnd() error   { return n.l.GroupEnd() }
func (n realNCCL) Recv(_ context.Context, buf driver.DevicePtr, count int, dt int32, peer int, c nccl.Handle, s driver.Stream) error {
	return n.l.Recv(buf, count, dt, peer, c, s)
}

// The real device's streams and events are the driver's.

func (r *realGPU) loadNCCL(env SearchEnv) (ncclAPI, error) {
	l, err := nccl.Load(env)
	if err != nil {
		return nil, err
	}
	return realNCCL{l}, nil
}
func (r *realGPU) mainStream() driver.Stream                       { return r.stream }
func (r *realGPU) newStream() (driver.Stream, error)               { return r.drv.NewStream() }
func (r *realGPU) syncStream(s driver.Stream) error                { return r.drv.SyncStream(s) }
func (r *realGPU) destroyStream(s driver.Stream) error             { return r.drv.DestroyStream(s) }
func (r *realGPU) newEvent() (driver.Event, error)                 { return r.drv.NewSyncEvent() }
func (r *realGPU) destroyEvent(e driver.Event) error               { return r.drv.DestroyEvent(e) }
func (r *realGPU) record(e driver.Event, s driver.Stream) error    { return r.drv.Record(e, s) }
func (r *realGPU) waitEvent(s driver.Stream, e driver.Event) error { return r.drv.WaitEvent(s, e) }
func (r *realGPU) reached(e driver.Event) (bool, error)            { return r.drv.Done(e) }

var (
	_ ncclDevice = (*realGPU)(nil)
	_ ncclAPI    = realNCCL{}
)
