package parallel

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"megago/tensor"
)

// RunLocal runs fn on n goroutine ranks connected by the in-process transport and waits
// for all of them. Each rank gets its own world Comm. Reductions combine contributions in
// rank order, so results are bitwise reproducible from run to run.
//
// A rank that returns an error or panics aborts the job: ranks blocked in (or later
// entering) a communication call get an *Error saying which rank failed, instead of
// hanging. So do ranks left waiting for a rank that has returned, or ranks that all wait
// on one another (a deadlock). Mismatched collectives (different ops, dtypes, sizes or
// roots at the same point of the sequence) fail on every rank involved. RunLocal returns
// the ranks' errors joined, each prefixed with its rank, or nil.
func RunLocal(n int, fn func(c Comm) error) error { return RunLocalWith(n, LocalOptions{}, fn) }

// LocalOptions tunes the in-process transport.
type LocalOptions struct {
	// StallTimeout is how long every running rank must stay blocked, with no call
	// completing anywhere, before the job is declared deadlocked and aborted; 0 means 10 s.
	// Waiting on a rank that has returned is detected at once, whatever this is.
	StallTimeout time.Duration
}

// RunLocalWith is RunLocal with options.
func RunLocalWith(n int, o LocalOptions, fn func(c Comm) error) error {
	if n < 1 {
		return fmt.Errorf("parallel: RunLocal: %d ranks", n)
	}
	if o.StallTimeout <= 0 {
		o.StallTimeout = 10 * time.Second
	}
	w := &localWorld{n: n, running: n, stall: o.StallTimeout, abortCh: make(chan struct{}), exited: map[int]bool{}, waiters: map[*waiter]struct{}{}}
	world := w.newGroup("world", seq(n))
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = runRank(r, world, fn)
			if errs[r] != nil {
				w.abort(fmt.Errorf("rank %d failed: %w", r, errs[r]))
			}
			w.exit(r)
		}()
	}
	wg.Wait()
	w.mu.Lock()
	if w.watchdog != nil {
		w.watchdog.Stop()
	}
	w.mu.Unlock()
	var out []error
	for r, err := range errs {
		if err != nil {
			out = append(out, fmt.Errorf("rank %d: %w", r, err))
		}
	}
	return errors.Join(out...)
}

func runRank(r int, world *localGroup, fn func(c Comm) error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v\n%s", p, debug.Stack())
		}
	}()
	return fn(&localComm{g: world, rank: r})
}

func seq(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

// localWorld is the state shared by all ranks of one RunLocal job. One mutex guards it and
// every group's bookkeeping; data is copied and reduced outside it.
type localWorld struct {
	n       int
	mu      sync.Mutex
	abortCh chan struct{}
	cause   error // why the job was aborted

	running  int                  // ranks whose fn has not returned
	exited   map[int]bool         // world ranks that have returned
	waiters  map[*waiter]struct{} // blocked calls
	progress uint64               // bumped whenever a call blocks or is released
	watchdog *time.Timer
	stall    time.Duration
}

// waiter is one blocked call: world rank r waits in what for the world ranks needs()
// still has to hear from.
type waiter struct {
	rank  int
	what  string
	needs func() []int
}

func (w *localWorld) abort(cause error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.abortLocked(cause)
}

func (w *localWorld) abortLocked(cause error) {
	if w.cause == nil {
		w.cause = cause
		close(w.abortCh)
	}
}

func (w *localWorld) exit(r int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.running--
	w.exited[r] = true
	w.progress++
	for wt := range w.waiters {
		w.checkWaiterLocked(wt)
	}
	w.checkStallLocked()
}

// blockLocked records a blocked call and checks at once whether it waits on a rank that
// has returned.
func (w *localWorld) blockLocked(wt *waiter) {
	w.waiters[wt] = struct{}{}
	w.progress++
	w.checkWaiterLocked(wt)
	w.checkStallLocked()
}

func (w *localWorld) unblockLocked(wt *waiter) {
	if _, ok := w.waiters[wt]; ok {
		delete(w.waiters, wt)
		w.progress++
	}
}

func (w *localWorld) checkWaiterLocked(wt *waiter) {
	for _, p := range wt.needs() {
		if w.exited[p] {
			w.abortLocked(fmt.Errorf("rank %d waits in %s for rank %d, which has returned", wt.rank, wt.what, p))
			return
		}
	}
}

// checkStallLocked arms the watchdog when every running rank is blocked: if nothing
// changes for stallGrace, the job is deadlocked.
func (w *localWorld) checkStallLocked() {
	if w.cause != nil || w.running == 0 || w.watchdog != nil {
		return
	}
	blocked := map[int]bool{}
	for wt := range w.waiters {
		blocked[wt.rank] = true
	}
	if len(blocked) < w.running {
		return
	}
	at := w.progress
	w.watchdog = time.AfterFunc(w.stall, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.watchdog = nil
		if w.cause != nil || w.running == 0 {
			return
		}
		if w.progress != at {
			w.checkStallLocked()
			return
		}
		var parts []string
		for wt := range w.waiters {
			parts = append(parts, fmt.Sprintf("rank %d waits in %s", wt.rank, wt.what))
		}
		sort.Strings(parts)
		w.abortLocked(fmt.Errorf("deadlock: every running rank has been blocked for %v: %s", w.stall, strings.Join(parts, "; ")))
	})
}

// localGroup is one group of ranks of a world.
type localGroup struct {
	w     *localWorld
	name  string
	ranks []int // world rank of each group rank

	pending map[uint64]*rendezvous // collectives in progress, by sequence number
	mail    map[[2]int][]message   // (from, to) → messages not yet received
	recvs   map[[2]int]*recvWait
}

// recvWait is a blocked Recv: closing ch releases it.
type recvWait struct {
	ch chan struct{}
	wt *waiter
}

func (w *localWorld) newGroup(name string, ranks []int) *localGroup {
	return &localGroup{w: w, name: name, ranks: ranks,
		pending: map[uint64]*rendezvous{}, mail: map[[2]int][]message{}, recvs: map[[2]int]*recvWait{}}
}

type message struct {
	dt   tensor.DType
	n    int
	data []byte
}

// call is one rank's arguments to a collective.
type call struct {
	kind       string // "all-reduce", ...
	op         Op
	dt         tensor.DType
	n          int // elements sent
	root       int
	name       string // Split
	color, key int    // Split
	data       []byte
}

func (c *call) describe() string {
	switch c.kind {
	case "barrier":
		return "barrier"
	case "split":
		return fmt.Sprintf("split(%q)", c.name)
	case "broadcast":
		return fmt.Sprintf("broadcast(root %d) %v×%d", c.root, c.dt, c.n)
	case "all-reduce", "reduce-scatter":
		return fmt.Sprintf("%s(%v) %v×%d", c.kind, c.op, c.dt, c.n)
	}
	return fmt.Sprintf("%s %v×%d", c.kind, c.dt, c.n)
}

type rendezvous struct {
	calls   []*call
	arrived int
	waiters []*waiter
	done    chan struct{}
	err     error
	results []any // per group rank: []byte or Comm
}

// localComm is one rank's handle on a group.
type localComm struct {
	g    *localGroup
	rank int
	seq  uint64
}

func (c *localComm) Rank() int           { return c.rank }
func (c *localComm) Size() int           { return len(c.g.ranks) }
func (c *localComm) Name() string        { return c.g.name }
func (c *localComm) WorldRank(r int) int { return c.g.ranks[r] }

func (c *localComm) fail(op string, peer int, err error) error {
	return &Error{Op: op, Group: c.g.name, Rank: c.rank, Size: c.Size(), Peer: peer, Err: err}
}

func (c *localComm) aborted(op string) error {
	return c.fail(op, -1, fmt.Errorf("aborted: %w", c.g.w.cause))
}

// collective deposits this rank's call and returns its result once every rank has
// arrived, the last of them having checked the calls agree and computed the results.
func (c *localComm) collective(ctx context.Context, my *call) (any, error) {
	g, w := c.g, c.g.w
	s := c.seq
	c.seq++
	w.mu.Lock()
	if w.cause != nil {
		w.mu.Unlock()
		return nil, c.aborted(my.kind)
	}
	r := g.pending[s]
	if r == nil {
		r = &rendezvous{calls: make([]*call, len(g.ranks)), done: make(chan struct{})}
		g.pending[s] = r
	}
	r.calls[c.rank] = my
	r.arrived++
	if r.arrived == len(g.ranks) {
		delete(g.pending, s)
		for _, wt := range r.waiters {
			w.unblockLocked(wt)
		}
		w.mu.Unlock()
		r.results, r.err = complete(g, r.calls)
		close(r.done)
	} else {
		wt := &waiter{rank: g.ranks[c.rank], what: fmt.Sprintf("%s on group %s", my.describe(), g.name), needs: func() []int {
			var missing []int
			for i, cl := range r.calls {
				if cl == nil {
					missing = append(missing, g.ranks[i])
				}
			}
			return missing
		}}
		r.waiters = append(r.waiters, wt)
		w.blockLocked(wt)
		w.mu.Unlock()
		select {
		case <-r.done:
		case <-w.abortCh:
			select {
			case <-r.done: // completed after all
			default:
				return nil, c.aborted(my.kind)
			}
		case <-ctx.Done():
			w.mu.Lock()
			w.unblockLocked(wt)
			w.mu.Unlock()
			return nil, c.fail(my.kind, -1, ctx.Err())
		}
	}
	if r.err != nil {
		return nil, c.fail(my.kind, -1, r.err)
	}
	return r.results[c.rank], nil
}

// complete checks that every rank made the same call and computes each rank's result.
func complete(g *localGroup, calls []*call) ([]any, error) {
	c0 := calls[0]
	for r, c := range calls[1:] {
		if c.kind != c0.kind || c.op != c0.op || c.dt != c0.dt || c.n != c0.n || c.root != c0.root || c.name != c0.name {
			return nil, fmt.Errorf("mismatched collectives: rank 0 called %s, rank %d called %s", c0.describe(), r+1, c.describe())
		}
	}
	n := len(calls)
	out := make([]any, n)
	switch c0.kind {
	case "all-reduce", "reduce-scatter":
		acc := slices.Clone(c0.data)
		for _, c := range calls[1:] {
			reduceInto(c0.dt, stepOp(c0.op), acc, c.data)
		}
		if c0.op == Avg {
			finishAvg(c0.dt, acc, n)
		}
		part := len(acc) / n
		for r := range out {
			if c0.kind == "all-reduce" {
				out[r] = acc
			} else {
				out[r] = acc[r*part : (r+1)*part]
			}
		}
	case "all-gather":
		all := make([]byte, 0, n*len(c0.data))
		for _, c := range calls {
			all = append(all, c.data...)
		}
		for r := range out {
			out[r] = all
		}
	case "broadcast":
		for r := range out {
			out[r] = calls[c0.root].data
		}
	case "split":
		splitGroups(g, calls, out)
	}
	return out, nil
}

// splitGroups creates the groups of a Split and hands each member its Comm.
func splitGroups(g *localGroup, calls []*call, out []any) {
	byColor := map[int][]int{}
	for r, c := range calls {
		if c.color >= 0 {
			byColor[c.color] = append(byColor[c.color], r)
		}
	}
	for _, members := range byColor {
		sort.SliceStable(members, func(i, j int) bool { return calls[members[i]].key < calls[members[j]].key })
		world := make([]int, len(members))
		for i, r := range members {
			world[i] = g.ranks[r]
		}
		ng := g.w.newGroup(calls[members[0]].name, world)
		for i, r := range members {
			out[r] = Comm(&localComm{g: ng, rank: i})
		}
	}
}

func (c *localComm) AllReduce(ctx context.Context, t *tensor.Tensor, op Op) error {
	if c.Size() == 1 {
		return nil
	}
	res, err := c.collective(ctx, &call{kind: "all-reduce", op: op, dt: t.DType(), n: t.Numel(), data: hostBytes(t)})
	if err != nil {
		return err
	}
	writeHost(t, res.([]byte))
	return nil
}

func (c *localComm) AllGather(ctx context.Context, dst, src *tensor.Tensor) error {
	checkSizes("AllGather", dst, src, c.Size(), true)
	if c.Size() == 1 {
		dst.CopyFrom(src.Reshape(dst.Shape()...))
		return nil
	}
	res, err := c.collective(ctx, &call{kind: "all-gather", dt: src.DType(), n: src.Numel(), data: hostBytes(src)})
	if err != nil {
		return err
	}
	writeHost(dst, res.([]byte))
	return nil
}

func (c *localComm) ReduceScatter(ctx context.Context, dst, src *tensor.Tensor, op Op) error {
	checkSizes("ReduceScatter", dst, src, c.Size(), false)
	if c.Size() == 1 {
		dst.CopyFrom(src.Reshape(dst.Shape()...))
		return nil
	}
	res, err := c.collective(ctx, &call{kind: "reduce-scatter", op: op, dt: src.DType(), n: src.Numel(), data: hostBytes(src)})
	if err != nil {
		return err
	}
	writeHost(dst, res.([]byte))
	return nil
}

func (c *localComm) Broadcast(ctx context.Context, t *tensor.Tensor, root int) error {
	if root < 0 || root >= c.Size() {
		panic(fmt.Sprintf("parallel: Broadcast: root %d outside group %s of size %d", root, c.g.name, c.Size()))
	}
	if c.Size() == 1 {
		return nil
	}
	var data []byte
	if c.rank == root {
		data = hostBytes(t)
	}
	res, err := c.collective(ctx, &call{kind: "broadcast", root: root, dt: t.DType(), n: t.Numel(), data: data})
	if err != nil {
		return err
	}
	if c.rank != root {
		writeHost(t, res.([]byte))
	}
	return nil
}

func (c *localComm) Barrier(ctx context.Context) error {
	if c.Size() == 1 {
		return nil
	}
	_, err := c.collective(ctx, &call{kind: "barrier"})
	return err
}

func (c *localComm) Split(ctx context.Context, name string, color, key int) (Comm, error) {
	res, err := c.collective(ctx, &call{kind: "split", name: name, color: color, key: key})
	if err != nil || res == nil {
		return nil, err
	}
	return res.(Comm), nil
}

func (c *localComm) checkPeer(op string, peer int) {
	if peer < 0 || peer >= c.Size() || peer == c.rank {
		panic(fmt.Sprintf("parallel: %s: peer %d invalid for rank %d of group %s (size %d)", op, peer, c.rank, c.g.name, c.Size()))
	}
}

// Send queues a copy of t for rank to and returns without waiting for the receive.
func (c *localComm) Send(ctx context.Context, t *tensor.Tensor, to int) error {
	c.checkPeer("Send", to)
	g, w := c.g, c.g.w
	msg := message{dt: t.DType(), n: t.Numel(), data: hostBytes(t)}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cause != nil {
		return c.aborted("send")
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

func (c *localComm) Recv(ctx context.Context, t *tensor.Tensor, from int) error {
	c.checkPeer("Recv", from)
	g, w := c.g, c.g.w
	k := [2]int{from, c.rank}
	for {
		w.mu.Lock()
		if w.cause != nil {
			w.mu.Unlock()
			return c.aborted("recv")
		}
		if q := g.mail[k]; len(q) > 0 {
			msg := q[0]
			g.mail[k] = q[1:]
			w.mu.Unlock()
			if msg.dt != t.DType() || msg.n != t.Numel() {
				return c.fail("recv", from, fmt.Errorf("got %v×%d, want %v×%d (%v)", msg.dt, msg.n, t.DType(), t.Numel(), t.Shape()))
			}
			writeHost(t, msg.data)
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
			return c.aborted("recv")
		case <-ctx.Done():
			w.mu.Lock()
			delete(g.recvs, k)
			w.unblockLocked(rw.wt)
			w.mu.Unlock()
			return c.fail("recv", from, ctx.Err())
		}
	}
}

// Self returns a group holding only the calling rank: every collective on it is the
// identity. Layers built for a single device use it as their TP group.
func Self() Comm {
	w := &localWorld{n: 1, running: 1, stall: time.Hour, abortCh: make(chan struct{}), exited: map[int]bool{}, waiters: map[*waiter]struct{}{}}
	return &localComm{g: w.newGroup("self", []int{0})}
}
