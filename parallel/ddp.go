package parallel

import (
	"context"
	"fmt"
	"sync"

	"megago/tensor"
)

// GradSync is the data-parallel half of Megatron's DistributedDataParallel: it reduces
// gradients bucket by bucket, starting each bucket's reduction as soon as backward has
// finished all of its gradients, so that communication overlaps the rest of backward. It
// works on tensors only: a bucket is a set of leaves (parameters) whose gradients lie in
// one contiguous range of a flat buffer, and reduce is whatever one bucket needs (an
// all-reduce of the range over the DP group, a reduce-scatter into this rank's shard
// under the distributed optimizer). Package optim's Buffer provides the ranges and
// Optimizer.ReduceBucket the reduction.
//
// Gradients accumulate over the micro-batches of a step, so a bucket is complete only in
// the last micro-batch's backward pass. Arm says when: the schedule's Hooks.LastBackward
// arms the parameters of that chunk. From then on each armed parameter's gradient hook
// (tensor.SetGradHook) marks it ready; a bucket whose parameters are all ready goes to a
// goroutine that reduces buckets in index order (the same order on every rank, as
// collectives require) while backward goes on. Finish waits for it and reduces the
// buckets that were not started, in order; call it after the schedule and before the
// optimizer step.
//
// Deferred buckets are never started early: Finish leaves them to the caller, who must do
// something else first (the tied word embedding is summed over the embedding group
// before it is averaged over DP).
//
// A parameter whose hook fires twice while armed (used in two recomputed segments, say)
// would have been reduced with part of its gradient: Finish reports it as an error, as
// Megatron's DDP asserts. Without Arm nothing overlaps and Finish reduces every bucket.
type GradSync struct {
	buckets []GradBucket
	reduce  func(ctx context.Context, bucket int) error
	trace   *Trace
	owner   map[*tensor.Tensor]int // parameter → its bucket

	mu      sync.Mutex
	wake    *sync.Cond
	armed   map[*tensor.Tensor]bool // armed and not yet ready
	ready   map[*tensor.Tensor]bool // ready this round
	pending []int                   // per bucket: parameters not yet ready
	next    int                     // the next bucket the worker may reduce
	busy    int                     // the bucket the worker is reducing, or -1
	done    bool                    // Finish was called: the worker stops at the first incomplete bucket
	running bool                    // a worker goroutine is running
	exited  chan struct{}
	err     error
}

// GradBucket is one bucket: the leaves whose gradients it reduces.
type GradBucket struct {
	Params   []*tensor.Tensor
	Deferred bool // reduced by the caller after Finish, never during backward
}

// NewGradSync watches the gradients of buckets' parameters (it sets their gradient
// hooks, replacing any others) and reduces bucket k with reduce(ctx, k). trace, if not
// nil, records each reduction. It panics if a parameter appears in two buckets.
func NewGradSync(buckets []GradBucket, reduce func(ctx context.Context, bucket int) error, trace *Trace) *GradSync {
	s := &GradSync{buckets: buckets, reduce: reduce, trace: trace, owner: map[*tensor.Tensor]int{}}
	s.wake = sync.NewCond(&s.mu)
	for k, b := range buckets {
		for _, p := range b.Params {
			if _, dup := s.owner[p]; dup {
				panic(fmt.Sprintf("parallel: NewGradSync: a %v parameter is in two buckets", p.Shape()))
			}
			s.owner[p] = k
			p.SetGradHook(s.hook)
		}
	}
	s.reset()
	return s
}

// reset starts a new round. Called with s.mu held or before any use.
func (s *GradSync) reset() {
	s.armed, s.ready = map[*tensor.Tensor]bool{}, map[*tensor.Tensor]bool{}
	s.pending = make([]int, len(s.buckets))
	for k, b := range s.buckets {
		s.pending[k] = len(b.Params)
	}
	s.next, s.busy, s.done, s.err = s.firstEager(0), -1, false, nil
}

// firstEager returns the first bucket from k on that is not deferred (len if none).
func (s *GradSync) firstEager(k int) int {
	for k < len(s.buckets) && s.buckets[k].Deferred {
		k++
	}
	return k
}

// Close removes the gradient hooks.
func (s *GradSync) Close() {
	for p := range s.owner {
		p.SetGradHook(nil)
	}
}

// Arm makes params (parameters of the buckets) count as ready once backward next
// finishes their gradients. The first Arm of a round starts the reducing goroutine, whose
// reductions run under that call's ctx. Call it just before the backward pass of the last
// micro-batch that reaches params. It panics if a parameter is in no bucket.
func (s *GradSync) Arm(ctx context.Context, params []*tensor.Tensor) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range params {
		if _, ok := s.owner[p]; !ok {
			panic(fmt.Sprintf("parallel: GradSync.Arm: a %v parameter is in no bucket", p.Shape()))
		}
		if !s.ready[p] {
			s.armed[p] = true
		}
	}
	if !s.running {
		s.running, s.exited = true, make(chan struct{})
		go s.worker(ctx)
	}
}

// hook runs on the backward goroutine when p's gradient is complete for this pass.
func (s *GradSync) hook(p *tensor.Tensor) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ready[p] {
		if s.err == nil {
			s.err = fmt.Errorf("parallel: GradSync: a %v parameter of bucket %d received more gradient after its bucket was complete "+
				"(a parameter used in two recomputed segments cannot be reduced during backward)", p.Shape(), s.owner[p])
		}
		return
	}
	if !s.armed[p] {
		return
	}
	delete(s.armed, p)
	s.ready[p] = true
	s.pending[s.owner[p]]--
	s.wake.Broadcast()
}

// worker reduces the eager buckets in index order as they become complete, until Finish
// finds it waiting on an incomplete one.
func (s *GradSync) worker(ctx context.Context) {
	defer close(s.exited)
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.next < len(s.buckets) {
		if s.pending[s.next] > 0 {
			if s.done {
				break
			}
			s.wake.Wait()
			continue
		}
		k := s.next
		s.busy = k
		s.mu.Unlock()
		err := s.reduceBucket(ctx, k)
		s.mu.Lock()
		s.busy = -1
		if err != nil && s.err == nil {
			s.err = err
		}
		if s.err != nil {
			break
		}
		s.next = s.firstEager(k + 1)
	}
	s.running = false
}

func (s *GradSync) reduceBucket(ctx context.Context, k int) error {
	start := s.trace.begin()
	err := s.reduce(ctx, k)
	s.trace.end(start, Event{Kind: EventReduce}, k, 0)
	return err
}

// Idle calls fn for every bucket the reducing goroutine has not taken this round
// (deferred buckets included), holding the GradSync's lock so that the goroutine cannot
// take one meanwhile: fn may touch those buckets' gradients (folding a micro-batch's
// bf16 gradients into fp32 main gradients after each backward step) without racing a
// reduction.
func (s *GradSync) Idle(fn func(bucket int)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, b := range s.buckets {
		if b.Deferred || (k > s.next || k == s.next && s.busy != k) {
			fn(k)
		}
	}
}

// Finish completes the round: it waits for the reducing goroutine, reduces every eager
// bucket it did not reach, in index order, and returns the first error. Deferred buckets
// are left to the caller. The next round starts unarmed.
func (s *GradSync) Finish(ctx context.Context) error {
	s.mu.Lock()
	s.done = true
	s.wake.Broadcast()
	exited := s.exited
	s.mu.Unlock()
	if exited != nil {
		<-exited
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.reset()
	s.exited = nil
	if s.err != nil {
		return s.err
	}
	for k := s.next; k < len(s.buckets); k = s.firstEager(k + 1) {
		if err := s.reduceBucket(ctx, k); err != nil {
			return err
		}
	}
	return nil
}

// AverageBuckets returns a reduce function for NewGradSync that averages elements
// [Start, End) of flat over dp, for each range in ranges: Megatron's all-reduce of a
// bucket of its grad buffer, without the distributed optimizer.
func AverageBuckets(dp Comm, flat *tensor.Tensor, ranges [][2]int) func(ctx context.Context, bucket int) error {
	return func(ctx context.Context, k int) error {
		r := ranges[k]
		if err := dp.AllReduce(ctx, flat.Narrow(0, r[0], r[1]-r[0]), Avg); err != nil {
			return fmt.Errorf("parallel: averaging gradient bucket %d over DP: %w", k, err)
		}
		return nil
	}
}
