package optim

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"megago/parallel"
)

// paramGather is the distributed optimizer's all-gather of the updated parameters over
// DP, bucket by bucket: at once at the end of Step, or, with Config.OverlapParamGather,
// deferred to the next forward pass (Megatron's overlap_param_gather). Deferred, a round
// starts at the first BeforeForward hook of any parameter: a goroutine then gathers the
// buckets in forward order (the reverse of the layout, so the embedding's first) while
// the forward pass runs, and each parameter's hook waits until its bucket is done.
// finish completes the round; the optimizer calls it before any other collective of
// its own on DP (ReduceBucket, Step), so no two of them run at once.
type paramGather struct {
	shards []*shard // in gather order
	ids    []int    // the bucket number a trace records for each (its index in Optimizer.shards)
	trace  *parallel.Trace

	mu      sync.Mutex
	cond    *sync.Cond
	ctx     context.Context // the deferring Step's, for the round's collectives
	pending bool            // a deferred round is not finished
	running bool            // its goroutine is running
	done    int             // buckets of the round gathered
	err     error
}

func newParamGather(shards []*shard, trace *parallel.Trace) *paramGather {
	g := &paramGather{shards: slices.Clone(shards), trace: trace}
	slices.Reverse(g.shards)
	for i := range g.shards {
		g.ids = append(g.ids, len(shards)-1-i)
	}
	g.cond = sync.NewCond(&g.mu)
	return g
}

// hook returns the BeforeForward hook of the parameters of g.shards[i].
func (g *paramGather) hook(i int) func() {
	return func() {
		if err := g.wait(i+1, false); err != nil {
			panic(err) // inside a forward pass: train.Trainer.Step recovers it
		}
	}
}

// bucket all-gathers g.shards[i] in place over its group (DP, or ExpertDP for expert
// parameters): each rank's shard is already in its slot. A group of one rank has nothing
// to gather.
func (g *paramGather) bucket(ctx context.Context, i int) error {
	sh := g.shards[i]
	if sh.dp.Size() == 1 {
		return nil
	}
	start := time.Now()
	bk := sh.buf.Buckets[sh.bucket]
	full := sh.buf.Params.Narrow(0, bk.Start, bk.End-bk.Start)
	err := sh.dp.AllGather(ctx, full, sh.buf.Params.Narrow(0, sh.lo, sh.hi-sh.lo))
	g.trace.Record(start, parallel.EventGather, g.ids[i], 0)
	if err != nil {
		return fmt.Errorf("optim: all-gathering parameters of bucket %d of the %s buffer over %s: %w", sh.bucket, sh.buf, sh.dp.Name(), err)
	}
	return nil
}

// all gathers every bucket now, in order.
func (g *paramGather) all(ctx context.Context) error {
	for i := range g.shards {
		if err := g.bucket(ctx, i); err != nil {
			return err
		}
	}
	return nil
}

// deferRound leaves the gather of this step's update to the next forward pass (or finish),
// under ctx.
func (g *paramGather) deferRound(ctx context.Context) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.ctx, g.pending, g.done, g.err = ctx, true, 0, nil
}

// wait returns once the first n buckets of a deferred round are gathered (at once if
// none is pending), starting the round's goroutine if it has not started. With finish
// set it waits for every bucket and for the goroutine to exit, and ends the round. It
// returns the round's error.
func (g *paramGather) wait(n int, finish bool) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.pending {
		return nil
	}
	if !g.running && g.done < len(g.shards) && g.err == nil {
		g.running = true
		go g.run(g.ctx)
	}
	if finish {
		n = len(g.shards)
	}
	for g.err == nil && g.done < n || finish && g.running {
		g.cond.Wait()
	}
	if finish && g.err == nil {
		g.pending = false
	}
	return g.err
}

// finish completes a deferred round (nothing if none is pending) and returns its error.
func (g *paramGather) finish() error { return g.wait(0, true) }

// run gathers the round's buckets in order under ctx.
func (g *paramGather) run(ctx context.Context) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for g.done < len(g.shards) && g.err == nil {
		i := g.done
		g.mu.Unlock()
		err := g.bucket(ctx, i)
		g.mu.Lock()
		g.err = err
		if err == nil {
			g.done++
		}
		g.cond.Broadcast()
	}
	g.running = false
	g.cond.Broadcast()
}
