package parallel

import (
	"fmt"
	"strings"
)

// Pipeline schedules, as Megatron's pipeline_parallel/schedules.py orders them (see
// MEGATRON-FACTS.md). A schedule is pure arithmetic: Plan lists the forward and backward
// steps one pipeline rank runs, in order; Pipeline.Train runs a plan. Letters: p stages,
// r this rank's stage, M micro-batches, V model chunks (virtual stages) per rank, G the
// interleaved schedule's micro-batch group size.

// Phase is a forward or a backward step (also the direction of a p2p transfer).
type Phase uint8

// Phases.
const (
	Forward Phase = iota + 1
	Backward
)

func (k Phase) String() string {
	switch k {
	case Forward:
		return "F"
	case Backward:
		return "B"
	}
	return fmt.Sprintf("Phase(%d)", uint8(k))
}

// PipeOp is one step of a plan: the forward or backward pass of micro-batch Micro
// through this rank's model chunk Chunk.
type PipeOp struct {
	Phase Phase
	Micro int
	Chunk int
}

// String writes the op as "F3" (chunk 0) or "B3.1" (chunk 1).
func (o PipeOp) String() string {
	if o.Chunk == 0 {
		return fmt.Sprintf("%v%d", o.Phase, o.Micro)
	}
	return fmt.Sprintf("%v%d.%d", o.Phase, o.Micro, o.Chunk)
}

// FormatPlan writes ops separated by spaces.
func FormatPlan(ops []PipeOp) string {
	s := make([]string, len(ops))
	for i, o := range ops {
		s[i] = o.String()
	}
	return strings.Join(s, " ")
}

// Schedule orders the forward and backward steps of one training step on each rank of a
// pipeline. Implementations: NoPipelining, OneFOneB and Interleaved.
type Schedule interface {
	// Plan returns the steps rank stage of stages runs, or an error if the schedule
	// cannot run on that many stages (the error is the same on every rank).
	Plan(stages, stage int) ([]PipeOp, error)
	// Microbatches returns M.
	Microbatches() int
	// Chunks returns V, the number of model chunks each rank holds.
	Chunks() int
}

// ForwardOnly returns the forward steps of s's plan in order: the evaluation schedule
// (Megatron's forward_only, which runs every forward as warmup).
func ForwardOnly(s Schedule, stages, stage int) ([]PipeOp, error) {
	ops, err := s.Plan(stages, stage)
	if err != nil {
		return nil, err
	}
	out := ops[:0:0]
	for _, o := range ops {
		if o.Phase == Forward {
			out = append(out, o)
		}
	}
	return out, nil
}

// NoPipelining runs M forward and backward passes one after the other, accumulating
// gradients (Megatron's forward_backward_no_pipelining). It needs a single stage.
type NoPipelining struct{ M int }

// Microbatches returns M.
func (s NoPipelining) Microbatches() int { return s.M }

// Chunks returns 1.
func (NoPipelining) Chunks() int { return 1 }

func (s NoPipelining) String() string { return fmt.Sprintf("no-pipelining-m%d", s.M) }

// Plan returns F0 B0 F1 B1 ….
func (s NoPipelining) Plan(stages, stage int) ([]PipeOp, error) {
	if err := checkPlan("no-pipelining", s.M, stages, stage); err != nil {
		return nil, err
	}
	if stages != 1 {
		return nil, fmt.Errorf("parallel: no-pipelining schedule on %d pipeline stages: use OneFOneB or Interleaved", stages)
	}
	ops := make([]PipeOp, 0, 2*s.M)
	for i := range s.M {
		ops = append(ops, PipeOp{Forward, i, 0}, PipeOp{Backward, i, 0})
	}
	return ops, nil
}

// OneFOneB is the non-interleaved one-forward-one-backward schedule (PipeDream-Flush,
// Megatron's forward_backward_pipelining_without_interleaving): rank r runs
// warmup = min(p−r−1, M) forward steps, then M−warmup steady pairs of one forward and one
// backward step, then warmup backward steps. So it holds the activations of at most
// min(p−r, M) micro-batches at once. On one stage it is NoPipelining.
type OneFOneB struct{ M int }

// Microbatches returns M.
func (s OneFOneB) Microbatches() int { return s.M }

// Chunks returns 1.
func (OneFOneB) Chunks() int { return 1 }

func (s OneFOneB) String() string { return fmt.Sprintf("1f1b-m%d", s.M) }

// Plan returns rank stage's steps.
func (s OneFOneB) Plan(stages, stage int) ([]PipeOp, error) {
	if err := checkPlan("1F1B", s.M, stages, stage); err != nil {
		return nil, err
	}
	warmup := min(stages-stage-1, s.M)
	ops := make([]PipeOp, 0, 2*s.M)
	for i := range warmup {
		ops = append(ops, PipeOp{Forward, i, 0})
	}
	for i := range s.M - warmup {
		ops = append(ops, PipeOp{Forward, warmup + i, 0}, PipeOp{Backward, i, 0})
	}
	for i := s.M - warmup; i < s.M; i++ {
		ops = append(ops, PipeOp{Backward, i, 0})
	}
	return ops, nil
}

// Interleaved is the interleaved 1F1B schedule with V model chunks per rank (Megatron's
// forward_backward_pipelining_with_interleaving). Chunk v of rank r holds the layers
// starting at v·L/V + r·L/(p·V). Micro-batches go through in groups of G (Megatron's
// microbatch_group_size_per_vp_stage, default p): all of a group through chunk 0, then
// through chunk 1, …; the last group takes the remaining micro-batches. Backward steps
// follow the same table with chunk V−1−v. Rank r runs
// warmup = min(2(p−r−1) + (V−1)·G, M·V) forward steps, then one forward and one backward
// step at a time, then the remaining backward steps.
//
// It needs p ≥ 2, V ≥ 2, p ≤ G ≤ M, and M mod G either 0 or at least p (a last group of
// fewer than p micro-batches would reach the first stage's next chunk before it is
// ready): M = 7 with p = 4 is an error.
type Interleaved struct {
	M int // micro-batches
	V int // model chunks per rank
	G int // micro-batch group size; 0 means p
}

// Microbatches returns M.
func (s Interleaved) Microbatches() int { return s.M }

// Chunks returns V.
func (s Interleaved) Chunks() int { return s.V }

func (s Interleaved) String() string {
	if s.G == 0 {
		return fmt.Sprintf("interleaved-m%d-v%d", s.M, s.V)
	}
	return fmt.Sprintf("interleaved-m%d-v%d-g%d", s.M, s.V, s.G)
}

// Plan returns rank stage's steps, or an error for a combination Megatron rejects.
func (s Interleaved) Plan(stages, stage int) ([]PipeOp, error) {
	table, err := s.Table(stages)
	if err != nil {
		return nil, err
	}
	if err := checkPlan("interleaved", s.M, stages, stage); err != nil {
		return nil, err
	}
	g := s.groupSize(stages)
	total := s.M * s.V
	warmup := min(2*(stages-stage-1)+(s.V-1)*g, total)
	fwd := func(k int) PipeOp { return PipeOp{Forward, table[k].Micro, table[k].Chunk} }
	bwd := func(k int) PipeOp { return PipeOp{Backward, table[k].Micro, s.V - 1 - table[k].Chunk} }
	ops := make([]PipeOp, 0, 2*total)
	for k := range warmup {
		ops = append(ops, fwd(k))
	}
	for k := range total - warmup {
		ops = append(ops, fwd(warmup+k), bwd(k))
	}
	for k := total - warmup; k < total; k++ {
		ops = append(ops, bwd(k))
	}
	return ops, nil
}

func (s Interleaved) groupSize(stages int) int {
	if s.G == 0 {
		return stages
	}
	return s.G
}

// Table returns Megatron's schedule table for p = stages: the (micro-batch, chunk) of
// each forward step in order, Phase Forward. It checks the constraints (see Interleaved).
func (s Interleaved) Table(stages int) ([]PipeOp, error) {
	g := s.groupSize(stages)
	switch {
	case stages < 2:
		return nil, fmt.Errorf("parallel: interleaved schedule needs at least 2 pipeline stages, have %d", stages)
	case s.V < 2:
		return nil, fmt.Errorf("parallel: interleaved schedule needs at least 2 model chunks per rank, have V=%d (use OneFOneB)", s.V)
	case g < stages || g > s.M:
		return nil, fmt.Errorf("parallel: interleaved schedule: micro-batch group size G=%d must be between the %d pipeline stages and the %d micro-batches", g, stages, s.M)
	case s.M%g != 0 && s.M%g < stages:
		return nil, fmt.Errorf("parallel: interleaved schedule: %d micro-batches in groups of %d leave a last group of %d, fewer than the %d pipeline stages (M mod G must be 0 or at least p)",
			s.M, g, s.M%g, stages)
	}
	var table []PipeOp
	for lo := 0; lo < s.M; lo += g {
		hi := lo + g
		if hi >= s.M { // the last group takes the rest
			hi = s.M
		}
		for v := range s.V {
			for i := lo; i < hi; i++ {
				table = append(table, PipeOp{Forward, i, v})
			}
		}
	}
	return table, nil
}

// checkPlan rejects what no schedule can run.
func checkPlan(name string, m, stages, stage int) error {
	switch {
	case m < 1:
		return fmt.Errorf("parallel: %s schedule with %d micro-batches", name, m)
	case stages < 1 || stage < 0 || stage >= stages:
		return fmt.Errorf("parallel: %s schedule: stage %d of %d", name, stage, stages)
	}
	return nil
}
