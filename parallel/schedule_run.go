package parallel

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"

	"megago/tensor"
)

// Step is what a forward-step function is given for one micro-batch on one model chunk.
type Step struct {
	Micro int // micro-batch index in [0, M)
	Chunk int // model chunk of this rank in [0, V)
	// Input is the previous stage's activation, a leaf that requires grad (training) whose
	// gradient the schedule sends back; nil on the model's first stage (chunk 0 of stage
	// 0), which reads its own data.
	Input *tensor.Tensor
	// Last is set on the model's last stage (chunk V−1 of stage p−1), where the function
	// returns the micro-batch's loss.
	Last bool
}

// ForwardFunc runs one micro-batch's forward pass through one model chunk: on the last
// stage it returns the micro-batch's loss (a scalar, before the schedule divides it by
// M), elsewhere the activation to send to the next stage. It knows the model; the
// schedules do not.
type ForwardFunc func(s Step) (*tensor.Tensor, error)

// Pipeline runs schedules on one rank of a pipeline: it owns the rank's p2p channels and
// the device its micro-batches' scopes are opened on. Make one per rank (NewPipeline),
// then call Train or Eval once per step. Not safe for concurrent use.
type Pipeline struct {
	p2p           *P2P // nil on a single stage
	dev           *tensor.Device
	stage, stages int
}

// NewPipeline makes rank pp.Rank()'s pipeline over the PP group pp (every rank of pp
// must call it). fixed, if its Shape is set, is the shape of every activation, which
// spares the shape headers (see P2P).
func NewPipeline(ctx context.Context, pp Comm, dev *tensor.Device, fixed P2PShape) (*Pipeline, error) {
	pl := &Pipeline{dev: dev, stage: pp.Rank(), stages: pp.Size()}
	if pp.Size() > 1 {
		var err error
		if pl.p2p, err = NewP2P(ctx, pp, dev, fixed); err != nil {
			return nil, err
		}
	}
	return pl, nil
}

// Stage returns this rank's stage.
func (pl *Pipeline) Stage() int { return pl.stage }

// Stages returns the number of stages.
func (pl *Pipeline) Stages() int { return pl.stages }

// Hooks let a training loop act at fixed points of a schedule; nil fields do nothing.
type Hooks struct {
	// ScaleLoss maps the last stage's loss (already divided by M) to the tensor backward
	// starts from: an fp16 loss scaler multiplies it.
	ScaleLoss func(loss *tensor.Tensor) *tensor.Tensor
	// LastBackward is called just before the backward step of the last micro-batch
	// through chunk c, after which chunk c's gradients are final once backward has
	// passed them: a data-parallel wrapper starts reducing them from there on (Megatron
	// enables grad sync at the same point).
	LastBackward func(chunk int)
	// AfterBackward is called after each backward step (fp32 accumulation of bf16
	// gradients).
	AfterBackward func(micro, chunk int)
	// Trace, if set, records the schedule's steps and transfers.
	Trace *Trace
}

// Train runs one training step under schedule s: every micro-batch forward and backward
// through this rank's chunks in s's order, exchanging activations and gradients with the
// neighbouring stages. Each micro-batch's loss is divided by M before backward, so the
// accumulated gradients are those of the mean loss; gradients are left accumulated in
// the parameters (call ZeroGrad between steps). On the last stage it returns the M losses
// as fwd returned them (before the division); elsewhere nil.
//
// Each micro-batch's activations live in a scope of their own, opened before its
// forward step and closed as soon as its backward step has sent the input's gradient, so
// rank r holds at most min(p−r, M) micro-batches' activations under OneFOneB.
//
// Errors from fwd and from communication are returned wrapped with the step; a panic in
// fwd or in backward (a failed TP collective inside autograd) is recovered into an error.
// After an error the pipeline's p2p groups are out of step: abort the job.
func (pl *Pipeline) Train(ctx context.Context, s Schedule, fwd ForwardFunc, h Hooks) ([]float64, error) {
	ops, err := s.Plan(pl.stages, pl.stage)
	if err != nil {
		return nil, err
	}
	return pl.run(ctx, s, ops, fwd, h, true)
}

// Eval runs the forward steps of s (ForwardOnly) with gradient recording off, releasing
// each micro-batch's activations once they are sent, and returns the losses on the last
// stage (nil elsewhere).
func (pl *Pipeline) Eval(ctx context.Context, s Schedule, fwd ForwardFunc, trace *Trace) ([]float64, error) {
	ops, err := ForwardOnly(s, pl.stages, pl.stage)
	if err != nil {
		return nil, err
	}
	var losses []float64
	pl.dev.NoGrad(func() { losses, err = pl.run(ctx, s, ops, fwd, Hooks{Trace: trace}, false) })
	return losses, err
}

// micro is the state of one (micro-batch, chunk) between its forward and backward steps.
type micro struct {
	scope *tensor.Scope
	in    *tensor.Tensor // received activation (nil on the first stage)
	out   *tensor.Tensor // sent activation, or the loss to start backward from
}

// runner executes one plan.
type runner struct {
	pl     *Pipeline
	ctx    context.Context
	m, v   int
	fwd    ForwardFunc
	h      Hooks
	train  bool
	losses []float64
	live   map[[2]int]*micro

	// The previous op's outgoing transfer, sent together with the next op's receive, and
	// the scope to close once it is sent.
	send      *tensor.Tensor
	sendDir   Phase
	sendScope *tensor.Scope
}

func (pl *Pipeline) run(ctx context.Context, s Schedule, ops []PipeOp, fwd ForwardFunc, h Hooks, train bool) (losses []float64, err error) {
	r := &runner{pl: pl, ctx: ctx, m: s.Microbatches(), v: s.Chunks(), fwd: fwd, h: h, train: train, live: map[[2]int]*micro{}}
	if pl.stage == pl.stages-1 {
		r.losses = make([]float64, r.m)
	}
	at := -1
	defer func() {
		if p := recover(); p != nil {
			where := "last send"
			if at >= 0 {
				where = fmt.Sprintf("step %d (%v)", at, ops[at])
			}
			losses, err = nil, fmt.Errorf("parallel: pipeline stage %d, %s: %w", pl.stage, where, recovered(p))
		}
		if err != nil {
			r.cleanup()
		}
	}()
	for i, op := range ops {
		at = i
		if err := r.step(op); err != nil {
			return nil, fmt.Errorf("parallel: pipeline stage %d, step %d (%v): %w", pl.stage, i, op, err)
		}
	}
	at = -1
	if err := r.flush(); err != nil {
		return nil, fmt.Errorf("parallel: pipeline stage %d, last send: %w", pl.stage, err)
	}
	if len(r.live) > 0 {
		return nil, fmt.Errorf("parallel: pipeline stage %d: %d micro-batches left without a backward step (the plan is broken)", pl.stage, len(r.live))
	}
	return r.losses, nil
}

// recovered turns a panic into an error, keeping a *Error (a failed collective) as it is.
func recovered(p any) error {
	if e, ok := p.(error); ok {
		var pe *Error
		if errors.As(e, &pe) {
			return e
		}
	}
	return fmt.Errorf("panic: %v\n%s", p, debug.Stack())
}

// cleanup closes the scopes left by a failed step: the one still open first (it is the
// innermost unless the failure left scopes of its own above it), then the suspended ones.
func (r *runner) cleanup() {
	defer func() { _ = recover() }() // a panic may have left inner scopes open
	for _, mb := range r.live {
		if !mb.scope.Suspended() {
			mb.scope.Close()
		}
	}
	for _, mb := range r.live {
		mb.scope.Close()
	}
	if r.sendScope != nil {
		r.sendScope.Close()
	}
}

func (r *runner) first(chunk int) bool { return r.pl.stage == 0 && chunk == 0 }
func (r *runner) last(chunk int) bool  { return r.pl.stage == r.pl.stages-1 && chunk == r.v-1 }

// exchange sends the pending transfer while receiving what op needs (dir 0: nothing),
// then closes the scope of the op that sent.
func (r *runner) exchange(op PipeOp, dir Phase) (*tensor.Tensor, error) {
	tr := Transfer{Send: r.send, SendDir: r.sendDir, RecvDir: dir}
	if tr.Send == nil && dir == 0 {
		return nil, nil
	}
	ev := r.h.Trace.begin()
	got, err := r.pl.p2p.Exchange(r.ctx, tr)
	r.h.Trace.end(ev, exchangeEvent(tr), op.Micro, op.Chunk)
	if r.sendScope != nil {
		r.sendScope.Close()
	}
	r.send, r.sendDir, r.sendScope = nil, 0, nil
	return got, err
}

func (r *runner) flush() error {
	_, err := r.exchange(PipeOp{Micro: -1}, 0)
	return err
}

// step runs one op: it opens (or resumes) the micro-batch's scope, receives its input,
// computes, and queues its output for the next exchange.
func (r *runner) step(op PipeOp) error {
	if op.Phase == Forward {
		return r.forward(op)
	}
	return r.backward(op)
}

func (r *runner) forward(op PipeOp) error {
	key := [2]int{op.Micro, op.Chunk}
	mb := &micro{scope: r.pl.dev.NewScope()}
	r.live[key] = mb
	var dir Phase
	if !r.first(op.Chunk) {
		dir = Forward
	}
	in, err := r.exchange(op, dir)
	if err != nil {
		return err
	}
	if in != nil && r.train {
		in.SetRequiresGrad(true)
	}
	mb.in = in
	ev := r.h.Trace.begin()
	out, err := r.fwd(Step{Micro: op.Micro, Chunk: op.Chunk, Input: in, Last: r.last(op.Chunk)})
	if err != nil {
		return err
	}
	if out == nil {
		return fmt.Errorf("forward step returned no tensor")
	}
	if r.last(op.Chunk) {
		if out.Numel() != 1 {
			panic(fmt.Sprintf("parallel: pipeline: the last stage's forward step returned %v, not a scalar loss", out.Shape()))
		}
		r.losses[op.Micro] = out.Item()
		if r.train {
			out = tensor.Scale(out, 1/float64(r.m))
			if r.h.ScaleLoss != nil {
				out = r.h.ScaleLoss(out)
			}
		}
	} else {
		r.send, r.sendDir = out, Forward
	}
	r.h.Trace.end(ev, Event{Kind: EventForward}, op.Micro, op.Chunk)
	mb.out = out
	mb.scope.Suspend()
	if !r.train { // nothing is kept for a backward step
		delete(r.live, key)
		r.sendScope = mb.scope
		if r.send == nil {
			mb.scope.Close()
			r.sendScope = nil
		}
	}
	return nil
}

func (r *runner) backward(op PipeOp) error {
	key := [2]int{op.Micro, op.Chunk}
	mb := r.live[key]
	if mb == nil {
		panic(fmt.Sprintf("parallel: pipeline: backward step %v before its forward step", op))
	}
	delete(r.live, key)
	if op.Micro == r.m-1 && r.h.LastBackward != nil {
		r.h.LastBackward(op.Chunk)
	}
	mb.scope.Resume()
	var dir Phase
	if !r.last(op.Chunk) {
		dir = Backward
	}
	dy, err := r.exchange(op, dir)
	if err != nil {
		r.live[key] = mb // open: cleanup closes it
		return err
	}
	ev := r.h.Trace.begin()
	if dy == nil {
		mb.out.Backward()
	} else {
		mb.out.BackwardWithGrad(dy)
	}
	r.h.Trace.end(ev, Event{Kind: EventBackward}, op.Micro, op.Chunk)
	if r.h.AfterBackward != nil {
		r.h.AfterBackward(op.Micro, op.Chunk)
	}
	if r.first(op.Chunk) {
		mb.scope.Close()
		return nil
	}
	dx := mb.in.Grad()
	if dx == nil { // the stage's output does not depend on its input
		dx = tensor.ZerosLike(mb.in)
	}
	mb.scope.Suspend()
	r.send, r.sendDir, r.sendScope = dx, Backward, mb.scope
	return nil
}
