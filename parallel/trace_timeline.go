package parallel

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// WriteTimeline draws traces as a timeline, two text rows per rank over width columns of
// equal time: the first shows the step running in each column, F for a forward and B for
// a backward step (lower case, f and b, on odd model chunks, so neighbouring chunks stand
// apart), and "." where the rank computes nothing (a bubble, or time spent waiting in
// p2p); the second shows the micro-batch of the step, in base 36. A column shows the step
// running at its middle. 1F1B with 4 micro-batches on 2 stages, backward steps twice as
// long as forward ones, one column per millisecond (see ExampleWriteTimeline):
//
//	stage 0  FFFF....BBBBFFBBBBFFBBBB..BBBB
//	         0011....0000221111332222..3333
//	stage 1  ..FFBBBBFFBBBBFFBBBBFFBBBB....
//	         ..000000111111222222333333....
//
// It panics if width < 1.
func WriteTimeline(w io.Writer, traces []*Trace, width int) error {
	if width < 1 {
		panic(fmt.Sprintf("parallel: WriteTimeline: width %d", width))
	}
	t0, t1, ok := computeSpan(traces)
	if !ok {
		_, err := fmt.Fprintln(w, "(no forward or backward steps traced)")
		return err
	}
	col := (t1 - t0) / time.Duration(width)
	if col <= 0 {
		col = 1
	}
	for _, tr := range traces {
		kinds, micros := []byte(strings.Repeat(".", width)), []byte(strings.Repeat(".", width))
		for _, e := range tr.Events() {
			if e.Kind != EventForward && e.Kind != EventBackward {
				continue
			}
			for c := range width {
				mid := t0 + col*time.Duration(c) + col/2
				if mid < e.Start || mid >= e.End {
					continue
				}
				k := byte('F')
				if e.Kind == EventBackward {
					k = 'B'
				}
				if e.Chunk%2 == 1 {
					k += 'a' - 'A'
				}
				kinds[c], micros[c] = k, base36(e.Micro)
			}
		}
		label := fmt.Sprintf("stage %d", tr.Rank)
		if _, err := fmt.Fprintf(w, "%-8s %s\n%-8s %s\n", label, kinds, "", micros); err != nil {
			return err
		}
	}
	return nil
}

func base36(i int) byte {
	const digits = "0123456789abcdefghijklmnopqrstuvwxyz"
	return digits[((i%36)+36)%36]
}

// computeSpan returns the earliest start and latest end of the traces' forward and
// backward steps.
func computeSpan(traces []*Trace) (t0, t1 time.Duration, ok bool) {
	for _, tr := range traces {
		for _, e := range tr.Events() {
			if e.Kind != EventForward && e.Kind != EventBackward {
				continue
			}
			if !ok || e.Start < t0 {
				t0 = e.Start
			}
			if !ok || e.End > t1 {
				t1 = e.End
			}
			ok = true
		}
	}
	return t0, t1, ok
}

// BubbleFraction measures the pipeline bubble of one step from its traces: the fraction
// of the step (from the first step's start to the last step's end, over all ranks) that a
// rank spends outside forward and backward steps, averaged over the ranks. For ideal
// 1F1B with negligible communication it is (p−1)/(M+p−1); interleaving with V chunks
// brings it towards (p−1)/(V·M+p−1).
func BubbleFraction(traces []*Trace) float64 {
	t0, t1, ok := computeSpan(traces)
	if !ok || t1 == t0 {
		return 0
	}
	var sum float64
	for _, tr := range traces {
		var busy time.Duration
		for _, e := range tr.Events() {
			if e.Kind == EventForward || e.Kind == EventBackward {
				busy += e.End - e.Start
			}
		}
		sum += 1 - float64(busy)/float64(t1-t0)
	}
	return sum / float64(len(traces))
}

// Simulate runs schedule s on stages ranks with ideal timing: each forward step takes
// forward and each backward step backward, transfers take no time, and a step starts as
// soon as its rank is free and its input has been computed on the neighbouring stage. It
// returns one trace per stage, with the epoch at the step's start, or an error if a plan
// is invalid or the plans deadlock (a stage waiting for a step its neighbour never gets
// to). The traces show a schedule's shape and ideal bubble without running a model.
func Simulate(s Schedule, stages int, forward, backward time.Duration) ([]*Trace, error) {
	sim := &simulator{stages: stages, chunks: s.Chunks(), plans: make([][]PipeOp, stages),
		next: make([]int, stages), free: make([]time.Duration, stages), done: map[simStep]time.Duration{}}
	for r := range stages {
		var err error
		if sim.plans[r], err = s.Plan(stages, r); err != nil {
			return nil, err
		}
	}
	traces := make([]*Trace, stages)
	for r := range traces {
		traces[r] = NewTrace(r, time.Time{})
	}
	for {
		left, progress := false, false
		for r := range stages {
			for sim.next[r] < len(sim.plans[r]) {
				e, ok := sim.start(r, forward, backward)
				if !ok {
					break
				}
				traces[r].Add(e)
				progress = true
			}
			left = left || sim.next[r] < len(sim.plans[r])
		}
		if !left {
			return traces, nil
		}
		if !progress {
			var stuck []string
			for r := range stages {
				if sim.next[r] < len(sim.plans[r]) {
					stuck = append(stuck, fmt.Sprintf("stage %d at %v", r, sim.plans[r][sim.next[r]]))
				}
			}
			return nil, fmt.Errorf("parallel: Simulate: the plans deadlock: %s", strings.Join(stuck, ", "))
		}
	}
}

// simStep is one step of one stage.
type simStep struct {
	op    PipeOp
	stage int
}

// simulator is the state of Simulate: each stage's plan, its next step, when it is free,
// and when each finished step ended.
type simulator struct {
	stages, chunks int
	plans          [][]PipeOp
	next           []int
	free           []time.Duration
	done           map[simStep]time.Duration
}

// dep returns the step whose output op on stage r needs, and whether there is one: the
// previous stage's forward (the last stage's previous chunk on stage 0), the next stage's
// backward (stage 0's next chunk on the last stage), or the own forward for the loss.
func (s *simulator) dep(op PipeOp, r int) (simStep, bool) {
	switch {
	case op.Phase == Forward && r > 0:
		return simStep{op, r - 1}, true
	case op.Phase == Forward && op.Chunk > 0:
		return simStep{PipeOp{Forward, op.Micro, op.Chunk - 1}, s.stages - 1}, true
	case op.Phase == Forward:
		return simStep{}, false
	case r == s.stages-1 && op.Chunk == s.chunks-1:
		return simStep{PipeOp{Forward, op.Micro, op.Chunk}, r}, true
	case r < s.stages-1:
		return simStep{op, r + 1}, true
	}
	return simStep{PipeOp{Backward, op.Micro, op.Chunk + 1}, 0}, true
}

// start runs stage r's next step if its input is ready, returning its event.
func (s *simulator) start(r int, forward, backward time.Duration) (Event, bool) {
	op := s.plans[r][s.next[r]]
	begin := s.free[r]
	if d, ok := s.dep(op, r); ok {
		end, finished := s.done[d]
		if !finished {
			return Event{}, false
		}
		begin = max(begin, end)
	}
	dur, kind := forward, EventForward
	if op.Phase == Backward {
		dur, kind = backward, EventBackward
	}
	s.free[r] = begin + dur
	s.done[simStep{op, r}] = s.free[r]
	s.next[r]++
	return Event{Start: begin, End: s.free[r], Kind: kind, Micro: op.Micro, Chunk: op.Chunk}, true
}
