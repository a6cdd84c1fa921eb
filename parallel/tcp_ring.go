package parallel

import (
	"context"
	"fmt"

	"megago/tensor"
)

// Data moves segment by segment between tensors and the wire: a segment is read from
// its tensor into a pooled buffer just before it is sent, and written to its tensor as
// soon as it has arrived (and been reduced), so a call needs memory for the segments in
// flight, not for a host copy of its tensors.

// readElems reads elements [a, b) of t into a pooled buffer.
func (t *tcpTransport) readElems(x *tensor.Tensor, a, b int) []byte {
	buf := t.pool.get((b - a) * x.DType().Size())
	if b > a {
		x.Device().Backend().ReadHost(subSpan(x, a, b), buf)
	}
	return buf
}

// writeElems writes p to elements [a, b) of t.
func writeElems(x *tensor.Tensor, a, b int, p []byte) {
	if b > a {
		x.Device().Backend().WriteHost(subSpan(x, a, b), p)
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
	// load returns a pooled buffer holding this rank's elements [a, b), sent at step 0.
	load func(a, b int) []byte
	// recv handles elements [a, b) received at step s in p (a pooled buffer) and returns
	// the buffer to send on at step s+1: p itself or another pooled buffer. What it does
	// not return it puts back in the pool.
	recv func(s, a, b int, p []byte) []byte
	// overwrite is the first step whose recv writes where load reads (chunk base), or
	// 0 if none does. The data it receives depends on what load read, through the
	// network; the step also waits for the loads, so that the ordering is visible to
	// the race detector too (writev does not tell it).
	overwrite int
}

// ring runs rp. A segment is sent, by a goroutine of its own, as soon as the previous
// step's receive of it has been handled, so sends, receives and reductions overlap and
// both directions of every link are busy.
func (o *tcpOp) ring(rp ringPass) error {
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

	ready := make(chan []byte, rp.steps*nseg) // buffers to send on, in order
	sent := make(chan error, 1)
	loaded := make(chan struct{})
	go func() {
		for s := range rp.steps {
			for k := range nseg {
				var buf []byte
				if s == 0 {
					buf = rp.load(seg(rp.base, k))
					if k == nseg-1 {
						close(loaded)
					}
				} else {
					select {
					case buf = <-ready:
					case <-o.failed:
						sent <- nil
						return
					}
				}
				if err := o.send(right, kindColl, 0, o.seq, buf); err != nil {
					sent <- err
					return
				}
				c.t.pool.put(buf)
			}
		}
		sent <- nil
	}()

	for s := range rp.steps {
		if s == rp.overwrite && s > 0 {
			select {
			case <-loaded:
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
				c.t.pool.put(next)
			}
		}
	}
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

func checkOp(name string, op Op) {
	if op < Sum || op > Avg {
		panic(fmt.Sprintf("parallel: %s: unknown op %v", name, op))
	}
}

// AllReduce is a ring reduce-scatter then a ring all-gather: every rank sends and
// receives 2(n−1)/n of t's bytes.
func (c *tcpComm) AllReduce(ctx context.Context, t *tensor.Tensor, op Op) error {
	checkOp("AllReduce", op)
	n := c.Size()
	if n == 1 {
		return nil
	}
	o, err := c.begin(ctx, "all-reduce", opAllReduce, t.DType())
	if err != nil {
		return err
	}
	defer o.end()
	dt := t.DType()
	step := stepOp(op)
	return o.ring(ringPass{numel: t.Numel(), esz: dt.Size(), base: c.rank, steps: 2 * (n - 1), overwrite: n - 1,
		load: func(a, b int) []byte { return c.t.readElems(t, a, b) },
		recv: func(s, a, b int, p []byte) []byte {
			if s >= n-1 { // all-gather half: p holds final values
				writeElems(t, a, b, p)
				return p
			}
			acc := c.t.readElems(t, a, b)
			reduceInto(dt, step, acc, p)
			c.t.pool.put(p)
			if s == n-2 { // acc is now fully reduced
				if op == Avg {
					finishAvg(dt, acc, n)
				}
				writeElems(t, a, b, acc)
			}
			return acc
		}})
}

// ReduceScatter is the reduce-scatter half of AllReduce, arranged so that rank r ends
// with chunk r.
func (c *tcpComm) ReduceScatter(ctx context.Context, dst, src *tensor.Tensor, op Op) error {
	checkOp("ReduceScatter", op)
	n := c.Size()
	checkSizes("ReduceScatter", dst, src, n, false)
	if n == 1 {
		dst.CopyFrom(src.Reshape(dst.Shape()...))
		return nil
	}
	o, err := c.begin(ctx, "reduce-scatter", opReduceScatter, src.DType())
	if err != nil {
		return err
	}
	defer o.end()
	dt := src.DType()
	step := stepOp(op)
	off := c.rank * dst.Numel() // of dst's elements in src
	return o.ring(ringPass{numel: src.Numel(), esz: dt.Size(), base: c.rank - 1, steps: n - 1,
		load: func(a, b int) []byte { return c.t.readElems(src, a, b) },
		recv: func(s, a, b int, p []byte) []byte {
			acc := c.t.readElems(src, a, b)
			reduceInto(dt, step, acc, p)
			c.t.pool.put(p)
			if s == n-2 {
				if op == Avg {
					finishAvg(dt, acc, n)
				}
				writeElems(dst, a-off, b-off, acc)
			}
			return acc
		}})
}

// AllGather is a ring all-gather: every rank sends and receives (n−1)/n of dst's bytes.
func (c *tcpComm) AllGather(ctx context.Context, dst, src *tensor.Tensor) error {
	n := c.Size()
	checkSizes("AllGather", dst, src, n, true)
	if n == 1 {
		dst.CopyFrom(src.Reshape(dst.Shape()...))
		return nil
	}
	o, err := c.begin(ctx, "all-gather", opAllGather, src.DType())
	if err != nil {
		return err
	}
	defer o.end()
	off := c.rank * src.Numel() // of src's elements in dst
	return o.ring(ringPass{numel: dst.Numel(), esz: src.DType().Size(), base: c.rank, steps: n - 1,
		load: func(a, b int) []byte {
			p := c.t.readElems(src, a-off, b-off)
			writeElems(dst, a, b, p)
			return p
		},
		recv: func(_, a, b int, p []byte) []byte {
			writeElems(dst, a, b, p)
			return p
		}})
}

// Broadcast pipelines t down the chain root, root+1, ..., root−1 (mod n), one segment
// at a time: each rank forwards a segment as soon as it has it.
func (c *tcpComm) Broadcast(ctx context.Context, t *tensor.Tensor, root int) error {
	n := c.Size()
	if root < 0 || root >= n {
		panic(fmt.Sprintf("parallel: Broadcast: root %d outside group %s of size %d", root, c.name, n))
	}
	if n == 1 {
		return nil
	}
	o, err := c.begin(ctx, "broadcast", opBroadcast, t.DType())
	if err != nil {
		return err
	}
	defer o.end()
	segs := c.segments(t)
	pos := (c.rank - root + n) % n
	right, left := (c.rank+1)%n, (c.rank+n-1)%n
	if pos == 0 {
		for _, sg := range segs {
			p := c.t.readElems(t, sg[0], sg[1])
			if err := o.send(right, kindColl, 0, o.seq, p); err != nil {
				return err
			}
			c.t.pool.put(p)
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
		f, err := o.recvColl(left, (sg[1]-sg[0])*t.DType().Size())
		if err != nil {
			return err
		}
		writeElems(t, sg[0], sg[1], f.p)
		if forward {
			ready <- f.p
		} else {
			c.t.pool.put(f.p)
		}
	}
	select {
	case err = <-sent:
	case <-o.ctx.Done():
		err = o.ctxFail(right)
	}
	return err
}

// segments cuts t's elements into ranges of at most SegmentBytes (at least one range).
func (c *tcpComm) segments(t *tensor.Tensor) [][2]int {
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
func (c *tcpComm) Barrier(ctx context.Context) error {
	n := c.Size()
	if n == 1 {
		return nil
	}
	o, err := c.begin(ctx, "barrier", opBarrier, 0)
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
