package tcp

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"megago/parallel"
	"megago/parallel/internal/transport"
	"megago/tensor"
)

// call is one call in flight on a comm: its deadline, and its failure once one of
// its goroutines has hit one.
type call struct {
	c      *comm
	what   transport.Kind // what the call does; a collective checks it on every frame
	dt     uint8          // dtype of the data, checked on every frame
	seq    uint64         // the group's collective number
	parent context.Context
	ctx    context.Context // parent with the transport's timeout
	cancel context.CancelFunc

	once   sync.Once
	err    error
	failed chan struct{} // closed when err is set

	waitOn    atomic.Int64 // world rank the call is blocked on, for probes; -1 before
	blameOnce sync.Once
	culprit   int    // world rank blame found
	chain     string // how blame found it
}

// abortWait bounds how long a failing rank spends telling the rest of its group.
const abortWait = time.Second

// begin starts a call, or returns the group's failure if it has already failed.
func (c *comm) begin(ctx context.Context, what transport.Kind, dt tensor.DType) (*call, error) {
	o := &call{c: c, what: what, dt: uint8(dt), parent: ctx, failed: make(chan struct{})}
	if f := c.g.failure(); f != nil {
		return nil, o.fromGroup(f)
	}
	if what.Collective() {
		o.seq = c.seq
		c.seq++
		c.g.begun.Store(c.seq)
	}
	o.ctx, o.cancel = context.WithTimeout(ctx, c.t.cfg.Timeout)
	o.waitOn.Store(-1)
	c.t.mu.Lock()
	c.t.active = append(c.t.active, o)
	c.t.mu.Unlock()
	return o, nil
}

// end releases the call's timer (goroutines still running see its context end) and
// takes it off the list probes read.
func (o *call) end() {
	o.cancel()
	t := o.c.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if i := slices.Index(t.active, o); i >= 0 {
		t.active = slices.Delete(t.active, i, i+1)
	}
}

func (o *call) newError(peer int, err error) *parallel.Error {
	c := o.c
	return &parallel.Error{Op: o.what.String(), Group: c.name, Rank: c.rank, Size: c.Size(), Peer: peer, Err: err}
}

// fail records that the call failed because of group rank peer (-1: not a peer's fault)
// and returns the error. The first failure of the group is sent to its other members so
// that they stop too.
func (o *call) fail(peer int, err error) error {
	culprit := -1
	if peer >= 0 {
		culprit = o.c.members[peer]
	}
	return o.failBy(culprit, err)
}

// failBy is fail with the culprit given as a world rank, which need not be a member.
func (o *call) failBy(culprit int, err error) error {
	o.once.Do(func() {
		c := o.c
		if !c.g.fail(groupFailure{culprit: culprit, reporter: c.t.rank, err: err}) {
			o.err = o.fromGroup(c.g.failure())
			close(o.failed)
			return
		}
		o.err = o.newError(c.groupRank(culprit), err)
		reason := err.Error()
		if culprit < 0 {
			// Not a peer's fault (this rank's context ended): the others see this rank as
			// the one that gave up.
			culprit = c.t.rank
			reason = "gave up: " + reason
		}
		c.t.tellGroup(c.g, c.members, abortMsg{culprit: culprit, reporter: c.t.rank, reason: reason}, -1)
		close(o.failed)
	})
	return o.err
}

// fromGroup turns the group's recorded failure into this call's error, once the other
// members have been told.
func (o *call) fromGroup(f *groupFailure) error {
	c := o.c
	t := time.NewTimer(2 * abortWait)
	select {
	case <-c.g.told:
	case <-t.C:
	}
	t.Stop()
	err := f.err
	if f.reporter != c.t.rank {
		err = fmt.Errorf("%w (reported by rank %d)", err, c.groupRank(f.reporter))
	}
	peer := -1
	if f.culprit >= 0 && f.culprit != c.t.rank {
		peer = c.groupRank(f.culprit)
	}
	return o.newError(peer, err)
}

// stopped returns the call's error if it, or its group, has failed.
func (o *call) stopped() error {
	select {
	case <-o.failed:
		return o.err
	case <-o.c.g.failed:
		o.once.Do(func() {
			o.err = o.fromGroup(o.c.g.failure())
			close(o.failed)
		})
		return o.err
	default:
		return nil
	}
}

// ctxFail is fail for a context that ended while waiting on group rank peer: the
// caller's context (nobody's fault), or the transport's timeout, which blames the rank
// at the end of the waits that start at peer (see blame.go).
func (o *call) ctxFail(peer int) error {
	if err := o.parent.Err(); err != nil {
		return o.fail(-1, err)
	}
	culprit, chain := o.blame(peer)
	return o.failBy(culprit, fmt.Errorf("timed out after %v waiting for %s: %w", o.c.t.cfg.Timeout, chain, context.DeadlineExceeded))
}

// send writes one frame of the call to group rank to.
func (o *call) send(to int, kind frameKind, flags uint8, seq uint64, p []byte) error {
	var op transport.Kind
	if kind == kindColl {
		op = o.what
	}
	h := header{kind: kind, op: op, dtype: o.dt, flags: flags, group: o.c.id, seq: seq}
	pc := o.c.conn(to)
	if err := pc.write(o.ctx, h, p); err != nil {
		if o.ctx.Err() != nil {
			return o.ctxFail(to)
		}
		// Whatever the peer sent before the connection broke is read first: an abort
		// among it names the rank at fault.
		pc.awaitReader()
		if err := o.stopped(); err != nil {
			return err
		}
		return o.fail(to, err)
	}
	return nil
}

// recv returns the next frame of the call's group and kind from group rank from.
func (o *call) recv(from int, kind frameKind) (frame, error) {
	pc := o.c.conn(from)
	b := pc.box(boxKey{o.c.id, kind})
	drained := false
	for {
		// Data already here is used even if the group has failed meanwhile, so that a
		// call the failure does not concern completes.
		f, ok, err := pc.pop(b)
		if ok {
			return f, nil
		}
		if err := o.stopped(); err != nil {
			return frame{}, err
		}
		if err != nil {
			if !drained {
				// The connection broke. What the peer sent before is read first: more
				// data, or an abort naming the rank at fault, of which this broken
				// connection may only be a consequence.
				pc.awaitReader()
				drained = true
				continue
			}
			return frame{}, o.fail(from, err)
		}
		o.waitFor(from)
		select {
		case <-b.wake:
		case <-pc.dead:
		case <-o.failed:
		case <-o.c.g.failed:
		case <-o.ctx.Done():
			return frame{}, o.ctxFail(from)
		}
	}
}

// recvColl returns the next collective frame from group rank from, checked to belong to
// this call and to carry n bytes.
func (o *call) recvColl(from, n int) (frame, error) {
	f, err := o.recv(from, kindColl)
	if err != nil {
		return f, err
	}
	h := f.h
	if h.op != o.what || h.seq != o.seq || h.dtype != o.dt || int(h.length) != n {
		o.c.t.pool.put(f.p)
		return frame{}, o.fail(from, fmt.Errorf("mismatched collectives: the peer is in %s #%d on %v data (segment of %d bytes), this rank in %s #%d on %v data (segment of %d bytes)",
			h.op, h.seq, tensor.DType(h.dtype), h.length, o.what, o.seq, tensor.DType(o.dt), n))
	}
	return f, nil
}
