package parallel

import (
	"context"
	"fmt"
	"slices"
	"sort"

	"megago/parallel/internal/transport"
	"megago/tensor"
)

// call is one rank's arguments to a collective.
type call struct {
	kind       transport.Kind
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
	case transport.Barrier:
		return "barrier"
	case transport.Split:
		return fmt.Sprintf("split(%q)", c.name)
	case transport.Broadcast:
		return fmt.Sprintf("broadcast(root %d) %v×%d", c.root, c.dt, c.n)
	case transport.AllReduce, transport.ReduceScatter:
		return fmt.Sprintf("%v(%v) %v×%d", c.kind, c.op, c.dt, c.n)
	}
	return fmt.Sprintf("%v %v×%d", c.kind, c.dt, c.n)
}

// rendezvous is where the ranks of a group meet for one collective.
type rendezvous struct {
	calls   []*call
	arrived int
	waiters []*waiter
	done    chan struct{}
	err     error
	results []any // per group rank: []byte or Comm
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
	case transport.AllReduce, transport.ReduceScatter:
		acc := slices.Clone(c0.data)
		op := transport.Op(c0.op)
		for _, c := range calls[1:] {
			transport.Reduce(c0.dt, op, acc, acc, c.data)
		}
		transport.Finish(c0.dt, op, acc, n)
		part := len(acc) / n
		for r := range out {
			if c0.kind == transport.AllReduce {
				out[r] = acc
			} else {
				out[r] = acc[r*part : (r+1)*part]
			}
		}
	case transport.AllGather:
		all := make([]byte, 0, n*len(c0.data))
		for _, c := range calls {
			all = append(all, c.data...)
		}
		for r := range out {
			out[r] = all
		}
	case transport.Broadcast:
		for r := range out {
			out[r] = calls[c0.root].data
		}
	case transport.Split:
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

// AllReduce reduces every rank's t in rank order.
func (c *localComm) AllReduce(ctx context.Context, t *tensor.Tensor, op Op) error {
	if c.Size() == 1 {
		return nil
	}
	res, err := c.collective(ctx, &call{kind: transport.AllReduce, op: op, dt: t.DType(), n: t.Numel(), data: transport.HostBytes(t)})
	if err != nil {
		return err
	}
	transport.WriteHost(t, res.([]byte))
	return nil
}

// AllGather concatenates every rank's src into dst.
func (c *localComm) AllGather(ctx context.Context, dst, src *tensor.Tensor) error {
	transport.CheckSizes("AllGather", dst, src, c.Size(), true)
	if c.Size() == 1 {
		dst.CopyFrom(src.Reshape(dst.Shape()...))
		return nil
	}
	res, err := c.collective(ctx, &call{kind: transport.AllGather, dt: src.DType(), n: src.Numel(), data: transport.HostBytes(src)})
	if err != nil {
		return err
	}
	transport.WriteHost(dst, res.([]byte))
	return nil
}

// ReduceScatter reduces every rank's src in rank order and keeps this rank's part.
func (c *localComm) ReduceScatter(ctx context.Context, dst, src *tensor.Tensor, op Op) error {
	transport.CheckSizes("ReduceScatter", dst, src, c.Size(), false)
	if c.Size() == 1 {
		dst.CopyFrom(src.Reshape(dst.Shape()...))
		return nil
	}
	res, err := c.collective(ctx, &call{kind: transport.ReduceScatter, op: op, dt: src.DType(), n: src.Numel(), data: transport.HostBytes(src)})
	if err != nil {
		return err
	}
	transport.WriteHost(dst, res.([]byte))
	return nil
}

// Broadcast copies root's t to every rank.
func (c *localComm) Broadcast(ctx context.Context, t *tensor.Tensor, root int) error {
	transport.CheckRoot(root, c.Size(), c.g.name)
	if c.Size() == 1 {
		return nil
	}
	var data []byte
	if c.rank == root {
		data = transport.HostBytes(t)
	}
	res, err := c.collective(ctx, &call{kind: transport.Broadcast, root: root, dt: t.DType(), n: t.Numel(), data: data})
	if err != nil {
		return err
	}
	if c.rank != root {
		transport.WriteHost(t, res.([]byte))
	}
	return nil
}

// Barrier returns once every rank of the group has called it.
func (c *localComm) Barrier(ctx context.Context) error {
	if c.Size() == 1 {
		return nil
	}
	_, err := c.collective(ctx, &call{kind: transport.Barrier})
	return err
}

// Split creates the groups of the ranks that pass the same color.
func (c *localComm) Split(ctx context.Context, name string, color, key int) (Comm, error) {
	res, err := c.collective(ctx, &call{kind: transport.Split, name: name, color: color, key: key})
	if err != nil || res == nil {
		return nil, err
	}
	return res.(Comm), nil
}

// AllToAllV exchanges the counts, then sends and receives each peer's run.
func (c *localComm) AllToAllV(ctx context.Context, dst, src *tensor.Tensor, sendCounts, recvCounts []int) error {
	return AllToAllVByP2P(ctx, c, dst, src, sendCounts, recvCounts)
}
