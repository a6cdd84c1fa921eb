package parallel

import (
	"context"
	"fmt"

	"megago/parallel/internal/transport"
	"megago/tensor"
)

// message is a Send's copy of its tensor, queued until its Recv.
type message struct {
	dt   tensor.DType
	n    int
	data []byte
}

// recvWait is a blocked Recv: closing ch releases it.
type recvWait struct {
	ch chan struct{}
	wt *waiter
}

// Send queues a copy of t for rank to and returns without waiting for the receive.
func (c *localComm) Send(ctx context.Context, t *tensor.Tensor, to int) error {
	transport.CheckPeer("Send", to, c.rank, c.Size(), c.g.name)
	g, w := c.g, c.g.w
	msg := message{dt: t.DType(), n: t.Numel(), data: transport.HostBytes(t)}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cause != nil {
		return c.aborted(transport.Send)
	}
	k := [2]int{c.rank, to}
	g.mail[k] = append(g.mail[k], msg)
	if rw := g.recvs[k]; rw != nil {
		delete(g.recvs, k)
		w.unblockLocked(rw.wt)
		close(rw.ch)
	}
	return nil
}

// Recv takes the oldest message from rank from, waiting for it if none is queued.
func (c *localComm) Recv(ctx context.Context, t *tensor.Tensor, from int) error {
	transport.CheckPeer("Recv", from, c.rank, c.Size(), c.g.name)
	g, w := c.g, c.g.w
	k := [2]int{from, c.rank}
	for {
		w.mu.Lock()
		if w.cause != nil {
			w.mu.Unlock()
			return c.aborted(transport.Recv)
		}
		if q := g.mail[k]; len(q) > 0 {
			msg := q[0]
			g.mail[k] = q[1:]
			w.mu.Unlock()
			if msg.dt != t.DType() || msg.n != t.Numel() {
				return c.fail(transport.Recv, from, fmt.Errorf("got %v×%d, want %v×%d (%v)", msg.dt, msg.n, t.DType(), t.Numel(), t.Shape()))
			}
			transport.WriteHost(t, msg.data)
			return nil
		}
		peer := g.ranks[from]
		rw := &recvWait{ch: make(chan struct{}), wt: &waiter{rank: g.ranks[c.rank],
			what: fmt.Sprintf("recv from rank %d on group %s", from, g.name), needs: func() []int { return []int{peer} }}}
		g.recvs[k] = rw
		w.blockLocked(rw.wt)
		w.mu.Unlock()
		select {
		case <-rw.ch:
		case <-w.abortCh:
			return c.aborted(transport.Recv)
		case <-ctx.Done():
			w.mu.Lock()
			delete(g.recvs, k)
			w.unblockLocked(rw.wt)
			w.mu.Unlock()
			return c.fail(transport.Recv, from, ctx.Err())
		}
	}
}
