package cuda

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"megago/cuda/internal/driver"
	"megago/cuda/internal/nccl"
	"megago/parallel"
	"megago/parallel/tcp"
	"megago/tensor"
)

// Comm is parallel.Comm over NCCL, for tensors on a CUDA Backend. It is created from a
// bootstrap Comm over the same ranks (the TCP transport, usually), which carries NCCL's
// unique id from rank 0 to the others and later Splits.
//
// Collectives and Recv are queued on the backend's stream, so they are ordered with the
// kernels around them, and then waited for while watching ctx and NCCL's asynchronous
// errors: a lost peer or an expired context aborts the communicator and returns a
// *parallel.Error. Send does not wait for its Recv (the pipeline schedules rely on it): the
// data is copied on the stream into a staging buffer that a second stream sends once the
// copy is done, so a Send and a Recv in flight on two ranks cannot deadlock. Tensors on
// another device are copied through the host.
//
// On the kernel emulator the Comm makes the same calls to the emulated NCCL, whose
// collectives complete (or fail) before they return; Send still returns without waiting
// for its Recv.
type Comm struct {
	nccl ncclAPI
	b    *Backend
	gpu  ncclDevice
	h    nccl.Handle
	boot parallel.Comm

	mu       sync.Mutex
	sendS    driver.Stream
	staging  []staged
	closed   bool
	ownsBoot bool // Close closes boot (NewCommFromEnv)
}

// staged is a buffer a queued Send reads from, reusable once done has been reached.
type staged struct {
	p     driver.DevicePtr
	bytes int64
	done  driver.Event
}

// NewComm creates the NCCL communicator of boot's ranks on b's device. Every rank of boot
// calls it; rank 0 creates the unique id and broadcasts it over boot. NCCL (libnccl) is
// opened on the first call for b, searched for as Config.Search says; when it cannot be
// found the error wraps ErrNoDevice. On the emulator (see the package doc) the emulated
// NCCL is used.
//
// boot may be any parallel.Comm: the TCP transport for processes (NewCommFromEnv), or
// the in-process transport for goroutine ranks (parallel.RunLocal), each rank with its
// own Backend, on its own device or all on the emulator.
func NewComm(ctx context.Context, boot parallel.Comm, b *Backend) (*Comm, error) {
	g, ok := b.dev.(ncclDevice)
	if !ok {
		return nil, errors.New("cuda: NewComm needs a backend on a real device or the emulator")
	}
	lib, err := b.nccl()
	if err != nil {
		return nil, err
	}
	c := &Comm{nccl: lib, b: b, gpu: g, boot: boot}
	idt := tensor.Zeros(tensor.NewCPU(), tensor.I64, 16)
	if boot.Rank() == 0 {
		id, err := lib.NewUniqueID()
		if err != nil {
			return nil, c.fail("init", err)
		}
		idt = tensor.FromSlice(tensor.NewCPU(), idWords(id), 16)
	}
	if err := boot.Broadcast(ctx, idt, 0); err != nil {
		return nil, err
	}
	id := wordsID(tensor.ToSlice[int64](idt))
	release := g.bind()
	defer release()
	if c.h, err = lib.InitRank(ctx, id, boot.Size(), boot.Rank()); err != nil {
		return nil, c.fail("init", err)
	}
	if c.sendS, err = g.newStream(); err != nil {
		return nil, c.fail("init", err)
	}
	return c, nil
}

// idWords and wordsID convert a unique id to and from 16 int64 words for the broadcast.
func idWords(id nccl.UniqueID) []int64 {
	w := make([]int64, 16)
	for i := range w {
		for j := 0; j < 8; j++ {
			w[i] |= int64(id.Internal[8*i+j]) << (8 * j)
		}
	}
	return w
}

func wordsID(w []int64) nccl.UniqueID {
	var id nccl.UniqueID
	for i, v := range w {
		for j := 0; j < 8; j++ {
			id.Internal[8*i+j] = byte(v >> (8 * j))
		}
	}
	return id
}

// Rank returns this rank's index in the group.
func (c *Comm) Rank() int { return c.boot.Rank() }

// Size returns the number of ranks.
func (c *Comm) Size() int { return c.boot.Size() }

// Name returns the group's name.
func (c *Comm) Name() string { return c.boot.Name() }

// WorldRank returns the world rank of group rank r.
func (c *Comm) WorldRank(r int) int { return c.boot.WorldRank(r) }

// fail wraps err as the parallel.Error of op on this group.
func (c *Comm) fail(op string, err error) error {
	return &parallel.Error{Op: op, Group: c.boot.Name(), Rank: c.boot.Rank(), Size: c.boot.Size(), Peer: -1, Err: err}
}

// ncclType returns NCCL's data type for dt.
func ncclType(dt tensor.DType) int32 {
	switch dt {
	case tensor.F64:
		return nccl.Float64
	case tensor.F32:
		return nccl.Float32
	case tensor.BF16:
		return nccl.Bfloat16
	case tensor.F16:
		return nccl.Float16
	case tensor.I32:
		return nccl.Int32
	}
	return nccl.Int64
}

// ncclOp returns NCCL's reduction for op.
func ncclOp(op parallel.Op) int32 {
	switch op {
	case parallel.Max:
		return nccl.Max
	case parallel.Min:
		return nccl.Min
	case parallel.Avg:
		return nccl.Avg
	}
	return nccl.Sum
}

// wait polls until the work queued so far on the backend's stream is done, ctx ends or
// NCCL reports an asynchronous error; on failure it aborts the communicator.
func (c *Comm) wait(ctx context.Context, op string) error {
	d := c.gpu
	ev, err := d.newEvent()
	if err != nil {
		return c.fail(op, err)
	}
	defer d.destroyEvent(ev)
	if err := d.record(ev, d.mainStream()); err != nil {
		return c.fail(op, err)
	}
	for pause := 20 * time.Microsecond; ; pause = min(2*pause, time.Millisecond) {
		done, err := d.reached(ev)
		if err != nil {
			return c.fail(op, err)
		}
		if done {
			return nil
		}
		if err := c.nccl.AsyncError(c.h); err != nil {
			return c.abort(op, err)
		}
		if err := ctx.Err(); err != nil {
			return c.abort(op, err)
		}
		time.Sleep(pause)
	}
}

// abort aborts the communicator after err (a lost peer, an expired context, a call NCCL
// refused) and returns err as op's error.
func (c *Comm) abort(op string, err error) error {
	c.nccl.Abort(c.h)
	c.closed = true
	return c.fail(op, err)
}

// onDevice returns t's device address, copying a tensor of another backend into a
// temporary device buffer (and back, by the returned function) first.
func (c *Comm) onDevice(t *tensor.Tensor) (driver.DevicePtr, func()) {
	s := t.Span()
	if s.Empty() || t.Numel() == 0 {
		return 0, func() {}
	}
	if t.Device().Backend() == tensor.Backend(c.b) {
		return c.b.ptr("NCCL", s), func() {}
	}
	host := make([]byte, t.Numel()*t.DType().Size())
	t.Device().Backend().ReadHost(s, host)
	p, err := c.b.alloc.get(int64(len(host)))
	c.b.must(err)
	c.b.must(c.gpu.htod(p, host))
	return p, func() {
		c.b.must(c.gpu.dtoh(host, p))
		c.b.alloc.put(p)
		t.Device().Backend().WriteHost(s, host)
	}
}

// run binds the device, checks the communicator, queues fn and waits for it. When fn
// fails (on the emulator, whose calls complete before they return: a lost peer or an
// expired context) the communicator is aborted.
func (c *Comm) run(ctx context.Context, op string, fn func() error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return c.fail(op, errors.New("communicator aborted after an earlier error"))
	}
	release := c.gpu.bind()
	defer release()
	if err := fn(); err != nil {
		return c.abort(op, err)
	}
	return c.wait(ctx, op)
}

// AllReduce replaces t on every rank with the reduction over the group.
func (c *Comm) AllReduce(ctx context.Context, t *tensor.Tensor, op parallel.Op) error {
	if c.Size() == 1 {
		return nil
	}
	return c.run(ctx, "all-reduce", func() error {
		p, back := c.onDevice(t)
		defer back()
		return c.nccl.AllReduce(ctx, p, p, t.Numel(), ncclType(t.DType()), ncclOp(op), c.h, c.gpu.mainStream())
	})
}

// AllGather sets dst to every rank's src in rank order.
func (c *Comm) AllGather(ctx context.Context, dst, src *tensor.Tensor) error {
	checkGather("all-gather", dst, src, c.Size(), true)
	return c.run(ctx, "all-gather", func() error {
		d, backD := c.onDevice(dst)
		defer backD()
		s, backS := c.onDevice(src)
		defer backS()
		if c.Size() == 1 {
			return c.gpu.dtod(d, s, int64(src.Numel()*src.DType().Size()))
		}
		return c.nccl.AllGather(ctx, s, d, src.Numel(), ncclType(src.DType()), c.h, c.gpu.mainStream())
	})
}

// ReduceScatter reduces src over the group and sets dst to this rank's part.
func (c *Comm) ReduceScatter(ctx context.Context, dst, src *tensor.Tensor, op parallel.Op) error {
	checkGather("reduce-scatter", dst, src, c.Size(), false)
	return c.run(ctx, "reduce-scatter", func() error {
		d, backD := c.onDevice(dst)
		defer backD()
		s, backS := c.onDevice(src)
		defer backS()
		if c.Size() == 1 {
			return c.gpu.dtod(d, s, int64(dst.Numel()*dst.DType().Size()))
		}
		return c.nccl.ReduceScatter(ctx, s, d, dst.Numel(), ncclType(dst.DType()), ncclOp(op), c.h, c.gpu.mainStream())
	})
}

// checkGather panics when dst and src do not fit a gather (or scatter) over size ranks.
func checkGather(op string, dst, src *tensor.Tensor, size int, gather bool) {
	big, small := dst, src
	if !gather {
		big, small = src, dst
	}
	if dst.DType() != src.DType() || big.Numel() != size*small.Numel() {
		panic(fmt.Sprintf("cuda: %s: dst %v %v and src %v %v over %d ranks", op, dst.DType(), dst.Shape(), src.DType(), src.Shape(), size))
	}
}

// Broadcast sets t on every rank to root's t.
func (c *Comm) Broadcast(ctx context.Context, t *tensor.Tensor, root int) error {
	if c.Size() == 1 {
		return nil
	}
	return c.run(ctx, "broadcast", func() error {
		p, back := c.onDevice(t)
		defer back()
		return c.nccl.Broadcast(ctx, p, p, t.Numel(), ncclType(t.DType()), root, c.h, c.gpu.mainStream())
	})
}

// Recv receives t's elements from rank from.
func (c *Comm) Recv(ctx context.Context, t *tensor.Tensor, from int) error {
	return c.run(ctx, "recv", func() error {
		p, back := c.onDevice(t)
		defer back()
		return c.nccl.Recv(ctx, p, t.Numel(), ncclType(t.DType()), from, c.h, c.gpu.mainStream())
	})
}

// Barrier returns once every rank has called it.
func (c *Comm) Barrier(ctx context.Context) error {
	if c.Size() == 1 {
		return nil
	}
	one := tensor.Ones(tensor.NewDevice(c.b), tensor.I32, 1)
	return c.AllReduce(ctx, one, parallel.Sum)
}

// Split partitions the group as parallel.Comm.Split does, with a new NCCL communicator
// per part.
func (c *Comm) Split(ctx context.Context, name string, color, key int) (parallel.Comm, error) {
	sub, err := c.boot.Split(ctx, name, color, key)
	if err != nil || sub == nil {
		return nil, err
	}
	nc, err := NewComm(ctx, sub, c.b)
	if err != nil {
		return nil, err
	}
	return nc, nil
}

// Close waits for the pending sends and destroys the communicator (not the bootstrap).
func (c *Comm) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	release := c.gpu.bind()
	defer release()
	errs := []error{c.gpu.syncStream(c.sendS)}
	for _, s := range c.staging {
		c.b.alloc.put(s.p)
		errs = append(errs, c.gpu.destroyEvent(s.done))
	}
	c.staging = nil
	if !c.closed {
		errs = append(errs, c.nccl.Destroy(c.h))
		c.closed = true
	}
	errs = append(errs, c.gpu.destroyStream(c.sendS))
	if cl, ok := c.boot.(io.Closer); ok && c.ownsBoot {
		errs = append(errs, cl.Close())
	}
	return errors.Join(errs...)
}

// The Comm implements parallel.Comm.
var _ parallel.Comm = (*Comm)(nil)

// NewCommFromEnv joins the job that torchrun, Slurm or `megago launch` describe in the
// environment (tcp.ConfigFromEnv): it connects the TCP transport, which then
// carries the unique id and later Splits, and creates the world's NCCL communicator on
// b's device (as NewComm). Close also closes the TCP transport.
func NewCommFromEnv(ctx context.Context, getenv func(string) string, b *Backend) (*Comm, error) {
	cfg, err := tcp.ConfigFromEnv(getenv)
	if err != nil {
		return nil, err
	}
	boot, err := tcp.New(ctx, cfg)
	if err != nil {
		return nil, err
	}
	c, err := NewComm(ctx, boot, b)
	if err != nil {
		if cl, ok := boot.(io.Closer); ok {
			cl.Close()
		}
		return nil, err
	}
	c.ownsBoot = true
	return c, nil
}
