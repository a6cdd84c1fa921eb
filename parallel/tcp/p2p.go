package tcp

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"sort"

	"megago/parallel"
	"megago/parallel/internal/transport"
	"megago/tensor"
)

// Send writes t's elements to the connection to rank to, in frames of at most
// Config.SegmentBytes, and returns once they are handed to the operating system: it
// does not wait for the matching Recv. The receiving process queues messages that have
// arrived before their Recv, without bound.
func (c *comm) Send(ctx context.Context, t *tensor.Tensor, to int) error {
	transport.CheckPeer("Send", to, c.rank, c.Size(), c.name)
	o, err := c.begin(ctx, transport.Send, t.DType())
	if err != nil {
		return err
	}
	defer o.end()
	seq := c.sendSeq[to].Add(1) - 1
	segs := c.segments(t)
	x := newRingTensor(t)
	o.waitFor(to)
	for k, sg := range segs {
		var flags uint8
		if k == len(segs)-1 {
			flags = flagLast
		}
		p := x.read(&c.t.pool, sg[0], sg[1])
		if err := o.send(to, kindP2P, flags, seq, p.p); err != nil {
			return err
		}
		p.release(&c.t.pool)
	}
	return nil
}

// Recv receives the next message from rank from into t. A message of another dtype or
// size is an error.
func (c *comm) Recv(ctx context.Context, t *tensor.Tensor, from int) error {
	transport.CheckPeer("Recv", from, c.rank, c.Size(), c.name)
	o, err := c.begin(ctx, transport.Recv, t.DType())
	if err != nil {
		return err
	}
	defer o.end()
	seq := c.recvSeq[from].Add(1) - 1
	segs := c.segments(t)
	x := newRingTensor(t)
	for k, sg := range segs {
		f, err := o.recv(from, kindP2P)
		if err != nil {
			return err
		}
		h, n := f.h, (sg[1]-sg[0])*t.DType().Size()
		last := k == len(segs)-1
		if h.seq != seq || h.dtype != o.dt || int(h.length) != n || (h.flags&flagLast != 0) != last {
			c.t.pool.put(f.p)
			return o.fail(from, fmt.Errorf("message #%d: got %v data (frame of %d bytes, last %t), want %v×%d %v (frame %d of %d bytes, last %t)",
				h.seq, tensor.DType(h.dtype), h.length, h.flags&flagLast != 0, t.DType(), t.Numel(), t.Shape(), k, n, last))
		}
		x.write(sg[0], sg[1], f.p)
		c.t.pool.put(f.p)
	}
	return nil
}

// Split all-gathers every rank's (color, key), then each rank builds its group from
// the ranks of its color. The new group's id hashes the parent's id, the split's
// sequence number and the color, so every member derives the same id without more
// messages.
func (c *comm) Split(ctx context.Context, name string, color, key int) (parallel.Comm, error) {
	n := c.Size()
	pairs := make([]byte, 16*n)
	le := binary.LittleEndian
	le.PutUint64(pairs[16*c.rank:], uint64(int64(color)))
	le.PutUint64(pairs[16*c.rank+8:], uint64(int64(key)))
	o, err := c.begin(ctx, transport.Split, tensor.I64)
	if err != nil {
		return nil, err
	}
	defer o.end()
	if n > 1 {
		err := o.ring(ringPass{numel: n, esz: 16, base: c.rank, steps: n - 1,
			load: func(a, b int) outBuf { return outBuf{p: pairs[16*a : 16*b]} },
			recv: func(_, a, b int, p []byte) outBuf {
				copy(pairs[16*a:16*b], p)
				return outBuf{p: p, pooled: true}
			}})
		if err != nil {
			return nil, err
		}
	}
	if color < 0 {
		return nil, nil
	}
	type member struct{ rank, key int }
	var ms []member
	for r := range n {
		if int(int64(le.Uint64(pairs[16*r:]))) == color {
			ms = append(ms, member{r, int(int64(le.Uint64(pairs[16*r+8:])))})
		}
	}
	sort.SliceStable(ms, func(i, j int) bool { return ms[i].key < ms[j].key })
	members := make([]int, len(ms))
	rank := -1
	for i, m := range ms {
		members[i] = c.members[m.rank]
		if m.rank == c.rank {
			rank = i
		}
	}
	h := fnv.New64a()
	var b [24]byte
	le.PutUint64(b[:], c.id)
	le.PutUint64(b[8:], o.seq)
	le.PutUint64(b[16:], uint64(int64(color)))
	h.Write(b[:])
	id := h.Sum64()
	if id <= worldGroupID {
		id += worldGroupID + 1
	}
	nc, err := c.t.newComm(id, name, members, rank)
	if err != nil {
		return nil, o.fail(-1, err)
	}
	return nc, nil
}

// AllToAllV exchanges the counts with an all-gather, then sends and receives each peer's
// run (parallel.AllToAllVByP2P): Send does not wait for its Recv, so the exchange cannot
// deadlock.
func (c *comm) AllToAllV(ctx context.Context, dst, src *tensor.Tensor, sendCounts, recvCounts []int) error {
	return parallel.AllToAllVByP2P(ctx, c, dst, src, sendCounts, recvCounts)
}
