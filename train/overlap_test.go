package train

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"megago/nn"
	"megago/optim"
	"megago/parallel"
	"megago/tensor"
)

// TestOverlapBitIdentical: at DP=2, reducing gradient buckets during backward (Megatron's
// --overlap-grad-reduce) and all-gathering the distributed optimizer's parameters during
// the next forward pass (--overlap-param-gather) train exactly as reducing after
// backward and gathering at the end of the step do.
func TestOverlapBitIdentical(t *testing.T) {
	for _, tc := range []struct {
		ref  layout
		runs []layout
	}{
		{layout{tp: 1, pp: 1, dp: 2, noOverlap: true}, []layout{{tp: 1, pp: 1, dp: 2}}},
		{layout{tp: 1, pp: 1, dp: 2, distributed: true, noOverlap: true}, []layout{
			{tp: 1, pp: 1, dp: 2, distributed: true},
			{tp: 1, pp: 1, dp: 2, distributed: true, gather: true},
		}},
	} {
		want := train3D(t, tc.ref, 3)
		for _, l := range tc.runs {
			t.Run(l.String(), func(t *testing.T) { compareExact(t, want, train3D(t, l, 3)) })
		}
	}
}

// overlapBucket is the bucket size of the traced runs: several buckets per rank.
const overlapBucket = 600

// tracedSteps trains the tiny GPT for two steps on DP=2 × PP=2 (interleaved, V=2) with
// the distributed optimizer, and returns each rank's trace of each step, with the
// number of gradient buckets of its optimizer.
func tracedSteps(t *testing.T, noOverlap, gather bool) (steps [][2][]parallel.Event, buckets []int) {
	t.Helper()
	l := layout{tp: 1, pp: 2, dp: 2, interleaved: true}
	steps, buckets = make([][2][]parallel.Event, 4), make([]int, 4)
	var mu sync.Mutex
	epoch := time.Now()
	err := parallel.RunLocal(4, func(world parallel.Comm) error {
		ctx := context.Background()
		mesh, err := parallel.NewMesh(ctx, world, parallel.Sizes{PP: l.pp, DP: l.dp})
		if err != nil {
			return err
		}
		dev := tensor.NewCPU()
		b := &nn.Builder{Dev: dev, DType: tensor.F64, RNG: tensor.NewRNG(7), TP: mesh.TP()}
		chunks, err := NewGPTChunks(b, tinyGPTConfig(false), mesh, l.chunks())
		if err != nil {
			return err
		}
		trace := parallel.NewTrace(world.Rank(), epoch)
		tr, err := New(ctx, mesh, dev, GPTParts(chunks), Config{NoOverlap: noOverlap, Trace: trace, Optim: optim.Config{
			LR: 1e-2, Distributed: true, OverlapParamGather: gather, BucketSize: overlapBucket}})
		if err != nil {
			return err
		}
		var events [2][]parallel.Event
		sched, rng := l.schedule(), tensor.NewRNG(99)
		for step := range 2 {
			trace.Reset(time.Now())
			pass := func(micro int) *nn.Pass {
				return PassFor(ctx, mesh, rng, step, micro, tinyBatch, sched.Microbatches())
			}
			if _, err := tr.Step(ctx, sched, GPTForward(chunks, pass, tinyGPTBatch(dev, mesh, step))); err != nil {
				return err
			}
			events[step] = trace.Events()
		}
		n := 0
		for _, buf := range tr.Optimizer().Buffers() {
			n += len(buf.Buckets)
		}
		mu.Lock()
		steps[world.Rank()], buckets[world.Rank()] = events, n
		mu.Unlock()
		return tr.Optimizer().FinishParamGather()
	})
	require.NoError(t, err)
	return steps, buckets
}

// span is the interval of the events of one kind: the earliest start and the latest
// end, and the earliest end.
type span struct{ firstStart, firstEnd, lastEnd time.Duration }

func spanOf(t *testing.T, events []parallel.Event, kind parallel.EventKind) (span, int) {
	t.Helper()
	var s span
	n := 0
	for _, e := range events {
		if e.Kind != kind {
			continue
		}
		if n == 0 || e.Start < s.firstStart {
			s.firstStart = e.Start
		}
		if n == 0 || e.End < s.firstEnd {
			s.firstEnd = e.End
		}
		s.lastEnd = max(s.lastEnd, e.End)
		n++
	}
	return s, n
}

// TestOverlapTrace reads the overlap off the parallel trace of each rank. With
// overlapped gradient reduction, the first bucket's reduction starts before the step's
// backward steps end (without it, after they end); with the overlapped parameter
// all-gather, no parameter is gathered in the step that updates it, and the next step's
// gathers start after its first forward step starts and before that step ends (without
// it, every bucket is gathered after the last backward step of the step that updates
// it).
func TestOverlapTrace(t *testing.T) {
	for _, tc := range []struct {
		name      string
		noOverlap bool
		gather    bool
	}{{"overlap", false, true}, {"no-overlap", true, false}} {
		t.Run(tc.name, func(t *testing.T) {
			steps, buckets := tracedSteps(t, tc.noOverlap, tc.gather)
			for r, ev := range steps {
				t.Run(fmt.Sprintf("rank%d", r), func(t *testing.T) {
					require.Greater(t, buckets[r], 2, "several buckets")
					checkReduceTrace(t, ev[0], buckets[r], !tc.noOverlap)
					checkGatherTrace(t, ev, buckets[r], tc.gather)
				})
			}
		})
	}
}

// checkReduceTrace checks a step's reductions: one per bucket, the first starting before
// the backward steps end when overlapped, after otherwise.
func checkReduceTrace(t *testing.T, events []parallel.Event, buckets int, overlapped bool) {
	t.Helper()
	back, _ := spanOf(t, events, parallel.EventBackward)
	var first *parallel.Event
	var reduced []int
	for _, e := range events {
		if e.Kind == parallel.EventReduce {
			reduced = append(reduced, e.Micro)
			if first == nil || e.Start < first.Start {
				first = &e
			}
		}
	}
	slices.Sort(reduced)
	require.Len(t, reduced, buckets, "one reduction per bucket: %v", events)
	require.Equal(t, 0, first.Micro, "bucket 0 (the last layers') is reduced first")
	if overlapped {
		assert.Less(t, first.Start, back.lastEnd, "the first bucket's reduction starts before backward ends\n%v", events)
	} else {
		assert.GreaterOrEqual(t, first.Start, back.lastEnd, "no reduction before backward ends\n%v", events)
	}
}

// checkGatherTrace checks where the parameter all-gathers of the update of step 0 fall.
func checkGatherTrace(t *testing.T, ev [2][]parallel.Event, buckets int, overlapped bool) {
	t.Helper()
	if !overlapped {
		back, _ := spanOf(t, ev[0], parallel.EventBackward)
		gather, n := spanOf(t, ev[0], parallel.EventGather)
		require.Equal(t, buckets, n, "every bucket gathered in the step\n%v", ev[0])
		assert.GreaterOrEqual(t, gather.firstStart, back.lastEnd, "gathered after backward")
		return
	}
	_, n := spanOf(t, ev[0], parallel.EventGather)
	require.Zero(t, n, "nothing gathered in the step that updates the parameters\n%v", ev[0])
	var first parallel.Event // step 1's first forward step
	for _, e := range ev[1] {
		if e.Kind == parallel.EventForward && (first.Kind == 0 || e.Start < first.Start) {
			first = e
		}
	}
	gather, n := spanOf(t, ev[1], parallel.EventGather)
	require.Equal(t, buckets, n, "every bucket gathered in the next step\n%v", ev[1])
	assert.GreaterOrEqual(t, gather.firstStart, first.Start, "the gathers start in the next forward pass\n%v", ev[1])
	assert.Less(t, gather.firstStart, first.End, "the first gather starts before the first forward step ends\n%v", ev[1])
	assert.LessOrEqual(t, gather.firstEnd, first.End, "that forward step waits for it\n%v", ev[1])
}
