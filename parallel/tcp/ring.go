package tcp

import (
	"context"
	"fmt"

	"megago/parallel"
	"megago/parallel/internal/transport"
	"megago/tensor"
)

// Data moves between tensors and the wire without staging when a tensor's storage is host
// memory (tensor.HostBytes): a rank sends straight from its tensor, reduces each segment
// it receives into the tensor in place and copies gathered segments into it. Tensors whose
// backend keeps them elsewhere are staged segment by segment through pooled buffers
// (ReadHost, WriteHost). Either way a call needs memory for the segments in flight, not
// for a copy of its tensors.

// ringTensor is a tensor as the collectives read and write it.
type ringTensor struct {
	t    *tensor.Tensor
	host []byte // t's own bytes, or nil when its backend's memory is opaque
	esz  int    // bytes per element
}

func newRingTensor(t *tensor.Tensor) ringTensor {
	return ringTensor{t: t, host: t.HostBytes(), esz: t.DType().Size()}
}

// at returns elements [a, b) of x's host memory, which must exist.
func (x ringTensor) at(a, b int) []byte { return x.host[a*x.esz : b*x.esz] }

// outBuf is a buffer to send: a pooled one, which the sender puts back, or a tensor's own
// memory.
type outBuf struct {
	p      []byte
	pooled bool
}

// read returns elements [a, b) of x for sending: its own memory, or a pooled copy.
func (x ringTensor) read(pool *bufPool, a, b int) outBuf {
	if x.host != nil {
		return outBuf{p: x.at(a, b)}
	}
	p := pool.get((b - a) * x.esz)
	if b > a {
		x.t.Device().Backend().ReadHost(subSpan(x.t, a, b), p)
	}
	return outBuf{p: p, pooled: true}
}

// write copies p to elements [a, b) of x.
func (x ringTensor) write(a, b int, p []byte) {
	switch {
	case x.host != nil:
		copy(x.at(a, b), p)
	case b > a:
		x.t.Device().Backend().WriteHost(subSpan(x.t, a, b), p)
	}
}

// release puts b back in the pool if it came from there.
func (b outBuf) release(pool *bufPool) {
	if b.pooled {
		pool.put(b.p)
	}
}

// subSpan is the span of elements [a, b) of t (tensors are contiguous).
func subSpan(t *tensor.Tensor, a, b int) tensor.Span {
	s := t.Span()
	s.Off += a
	s.Shape = tensor.Shape{b - a}
	return s
}

// ringPass is one pass of a ring over numel elements of esz bytes, split into Size()
// nearly equal chunks, each cut into the same number of segments. At step s this rank
// sends chunk base−s to its right neighbour and receives chunk base−s−1 from its left
// one.
type ringPass struct {
	numel, esz  int
	base, steps int
	// load returns this rank's elements [a, b), sent at step 0.
	load func(a, b int) outBuf
	// recv handles elements [a, b) received at step s in p (a pooled buffer) and returns
	// what to send on at step s+1: p itself, another pooled buffer or tensor memory.
	// What it does not return of p it puts back in the pool.
	recv func(s, a, b int, p []byte) outBuf
	// rewrite, when positive, says that the recv of step s ≥ rewrite writes the memory
	// sent at step s−rewrite (AllReduce sends from its tensor and later receives into
	// it): that step waits until the sender has handed those segments to the kernel.
	// The data it receives depends on them, through the network, so the wait is short;
	// it makes the order explicit, for the race detector too (writev does not tell it).
	rewrite int
}

// ring runs rp. A segment is sent, by a goroutine of its own, as soon as the previous
// step's receive of it has been handled, so sends, receives and reductions overlap and
// both directions of every link are busy.
func (o *call) ring(rp ringPass) error {
	c := o.c
	n := c.Size()
	right, left := (c.rank+1)%n, (c.rank+n-1)%n
	segElems := max(1, c.t.cfg.SegmentBytes/rp.esz)
	maxChunk := (rp.numel + n - 1) / n
	nseg := max(1, (maxChunk+segElems-1)/segElems)
	seg := func(chunk, k int) (int, int) {
		chunk = ((chunk % n) + n) % n
		lo, hi := chunk*rp.numel/n, (chunk+1)*rp.numel/n
		m := hi - lo
		return lo + k*m/nseg, lo + (k+1)*m/nseg
	}

	ready := make(chan outBuf, rp.steps*nseg) // buffers to send on, in order
	sent := make(chan error, 1)
	stepSent := make([]chan struct{}, rp.steps) // closed when step s has been sent
	for s := range stepSent {
		stepSent[s] = make(chan struct{})
	}
	go func() {
		for s := range rp.steps {
			for k := range nseg {
				var buf outBuf
				if s == 0 {
					buf = rp.load(seg(rp.base, k))
				} else {
					select {
					case buf = <-ready:
					case <-o.failed:
						sent <- nil
						return
					}
				}
				if err := o.send(right, kindColl, 0, o.seq, buf.p); err != nil {
					sent <- err
					return
				}
				buf.release(&c.t.pool)
			}
			close(stepSent[s])
		}
		sent <- nil
	}()

	for s := range rp.steps {
		if rp.rewrite > 0 && s >= rp.rewrite {
			select {
			case <-stepSent[s-rp.rewrite]:
			case <-o.failed:
				return o.err
			}
		}
		for k := range nseg {
			a, b := seg(rp.base-s-1, k)
			f, err := o.recvColl(left, (b-a)*rp.esz)
			if err != nil {
				return err
			}
			next := rp.recv(s, a, b, f.p)
			if s < rp.steps-1 {
				ready <- next
			} else {
				next.release(&c.t.pool)
			}
		}
	}
	o.waitFor(right)
	select {
	case err := <-sent:
		if err == nil {
			err = o.stopped()
		}
		return err
	case <-o.failed:
		return o.err
	case <-o.ctx.Done():
		return o.ctxFail(right)
	}
}

func checkOp(name string, op parallel.Op) {
	if op < parallel.Sum || op > parallel.Avg {
		panic(fmt.Sprintf("parallel: %s: unknown op %v", name, op))
	}
}

// AllReduce is a ring reduce-scatter then a ring all-gather: every rank sends and
// receives 2(n−1)/n of t's bytes.
func (c *comm) AllReduce(ctx context.Context, t *tensor.Tensor, op parallel.Op) error {
	checkOp("AllReduce", op)
	n := c.Size()
	if n == 1 {
		return nil
	}
	o, err := c.begin(ctx, transport.AllReduce, t.DType())
	if err != nil {
		return err
	}
	defer o.end()
	dt, x, pool, rop := t.DType(), newRingTensor(t), &c.t.pool, transport.Op(op)
	return o.ring(ringPass{numel: t.Numel(), esz: x.esz, base: c.rank, steps: 2 * (n - 1), rewrite: n - 1,
		load: func(a, b int) outBuf { return x.read(pool, a, b) },
		recv: func(s, a, b int, p []byte) outBuf {
			if s >= n-1 { // all-gather half: p holds final values
				x.write(a, b, p)
				return outBuf{p: p, pooled: true}
			}
			acc := x.read(pool, a, b)
			transport.Reduce(dt, rop, acc.p, acc.p, p)
			pool.put(p)
			if s == n-2 { // acc is now fully reduced
				transport.Finish(dt, rop, acc.p, n)
				if acc.pooled {
					x.write(a, b, acc.p)
				}
			}
			return acc
		}})
}

// ReduceScatter is the reduce-scatter half of AllReduce, arranged so that rank r ends
// with chunk r.
func (c *comm) ReduceScatter(ctx context.Context, dst, src *tensor.Tensor, op parallel.Op) error {
	checkOp("ReduceScatter", op)
	n := c.Size()
	transport.CheckSizes("ReduceScatter", dst, src, n, false)
	if n == 1 {
		dst.CopyFrom(src.Reshape(dst.Shape()...))
		return nil
	}
	o, err := c.begin(ctx, transport.ReduceScatter, src.DType())
	if err != nil {
		return err
	}
	defer o.end()
	dt, x, y, pool, rop := src.DType(), newRingTensor(src), newRingTensor(dst), &c.t.pool, transport.Op(op)
	off := c.rank * dst.Numel() // of dst's elements in src
	return o.ring(ringPass{numel: src.Numel(), esz: x.esz, base: c.rank - 1, steps: n - 1,
		load: func(a, b int) outBuf { return x.read(pool, a, b) },
		recv: func(s, a, b int, p []byte) outBuf {
			mine := x.read(pool, a, b)
			last := s == n-2
			acc := p // op(mine, p), into dst itself at the last step when it can be
			if last && y.host != nil {
				acc = y.at(a-off, b-off)
			}
			transport.Reduce(dt, rop, acc, mine.p, p)
			mine.release(pool)
			if last {
				transport.Finish(dt, rop, acc, n)
				if y.host == nil {
					y.write(a-off, b-off, acc)
				}
			}
			return outBuf{p: p, pooled: true}
		}})
}

// AllGather is a ring all-gather: every rank sends and receives (n−1)/n of dst's bytes.
func (c *comm) AllGather(ctx context.Context, dst, src *tensor.Tensor) error {
	n := c.Size()
	transport.CheckSizes("AllGather", dst, src, n, true)
	if n == 1 {
		dst.CopyFrom(src.Reshape(dst.Shape()...))
		return nil
	}
	o, err := c.begin(ctx, transport.AllGather, src.DType())
	if err != nil {
		return err
	}
	defer o.end()
	x, y, pool := newRingTensor(src), newRingTensor(dst), &c.t.pool
	off := c.rank * src.Numel() // of src's elements in dst
	return o.ring(ringPass{numel: dst.Numel(), esz: x.esz, base: c.rank, steps: n - 1,
		load: func(a, b int) outBuf {
			p := x.read(pool, a-off, b-off)
			y.write(a, b, p.p)
			return p
		},
		recv: func(_, a, b int, p []byte) outBuf {
			y.write(a, b, p)
			return outBuf{p: p, pooled: true}
		}})
}

// Broadcast pipelines t down the chain root, root+1, ..., root−1 (mod n), one segment
// at a time: each rank forwards a segment as soon as it has it.
func (c *comm) Broadcast(ctx context.Context, t *tensor.Tensor, root int) error {
	n := c.Size()
	transport.CheckRoot(root, n, c.name)
	if n == 1 {
		return nil
	}
	o, err := c.begin(ctx, transport.Broadcast, t.DType())
	if err != nil {
		return err
	}
	defer o.end()
	segs := c.segments(t)
	x := newRingTensor(t)
	pos := (c.rank - root + n) % n
	right, left := (c.rank+1)%n, (c.rank+n-1)%n
	if pos == 0 {
		o.waitFor(right)
		for _, sg := range segs {
			p := x.read(&c.t.pool, sg[0], sg[1])
			if err := o.send(right, kindColl, 0, o.seq, p.p); err != nil {
				return err
			}
			p.release(&c.t.pool)
		}
		return nil
	}
	forward := pos < n-1
	ready := make(chan []byte, len(segs))
	sent := make(chan error, 1)
	if forward {
		go func() {
			for range segs {
				var p []byte
				select {
				case p = <-ready:
				case <-o.failed:
					sent <- nil
					return
				}
				if err := o.send(right, kindColl, 0, o.seq, p); err != nil {
					sent <- err
					return
				}
				c.t.pool.put(p)
			}
			sent <- nil
		}()
	} else {
		sent <- nil
	}
	for _, sg := range segs {
		f, err := o.recvColl(left, (sg[1]-sg[0])*x.esz)
		if err != nil {
			return err
		}
		x.write(sg[0], sg[1], f.p)
		if forward {
			ready <- f.p
		} else {
			c.t.pool.put(f.p)
		}
	}
	o.waitFor(right)
	select {
	case err = <-sent:
	case <-o.ctx.Done():
		err = o.ctxFail(right)
	}
	return err
}

// segments cuts t's elements into ranges of at most SegmentBytes (at least one range).
func (c *comm) segments(t *tensor.Tensor) [][2]int {
	per := max(1, c.t.cfg.SegmentBytes/t.DType().Size())
	n := t.Numel()
	segs := [][2]int{{0, min(per, n)}}
	for a := per; a < n; a += per {
		segs = append(segs, [2]int{a, min(a+per, n)})
	}
	return segs
}

// Barrier is a dissemination barrier: in round i every rank signals rank+2^i and waits
// for rank−2^i, so after ⌈log2 n⌉ rounds each has heard, indirectly, from all.
func (c *comm) Barrier(ctx context.Context) error {
	n := c.Size()
	if n == 1 {
		return nil
	}
	o, err := c.begin(ctx, transport.Barrier, 0)
	if err != nil {
		return err
	}
	defer o.end()
	for d := 1; d < n; d *= 2 {
		if err := o.send((c.rank+d)%n, kindColl, 0, o.seq, nil); err != nil {
			return err
		}
		f, err := o.recvColl((c.rank-d+n)%n, 0)
		if err != nil {
			return err
		}
		c.t.pool.put(f.p)
	}
	return nil
}
