package train

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"megago/nn"
	"megago/optim"
	"megago/parallel"
	"megago/tensor"
)

// Config configures a Trainer.
type Config struct {
	// Optim configures the optimizer; zero Groups are filled from the mesh
	// (optim.MeshGroups).
	Optim optim.Config
	// NoOverlap reduces every gradient bucket after the schedule instead of during the
	// last micro-batch's backward pass (the results are the same). The library overlaps
	// by default; Megatron's command line does not (--overlap-grad-reduce), and the
	// examples follow it. Optim.OverlapParamGather overlaps the distributed optimizer's
	// parameter all-gather with the next forward pass.
	NoOverlap bool
	// P2PShape, if its Shape is set, is the shape of every activation sent between
	// stages, which spares the shape headers; leave it zero for variable sequence
	// lengths.
	P2PShape parallel.P2PShape
	// Trace, if set, records this rank's steps, transfers, reductions and parameter
	// all-gathers (it is the optimizer's trace too, unless Optim.Trace is set).
	Trace *parallel.Trace
}

// Trainer runs 3-D parallel training steps on one rank: a pipeline schedule over the PP
// group, gradient reduction over DP (bucket by bucket, overlapping backward), the tied
// embedding's gradient sum over the embedding group, the sequence-parallel norms' sum
// over TP, and the optimizer step. Make one per rank with New; it is not safe for
// concurrent use.
type Trainer struct {
	mesh  *parallel.Mesh
	dev   *tensor.Device
	opt   *optim.Optimizer
	pipe  *parallel.Pipeline
	sync  *parallel.GradSync
	parts Parts
	cfg   Config

	chunkLeaves [][]*tensor.Tensor // per chunk: its parameters' tensors (armed by LastBackward)
	buckets     [][2]int           // GradSync bucket → (buffer, bucket) of the optimizer
	tied        []tiedGrad
	sp          []*nn.Param // sequence-parallel parameters
	// afterStep, if set, runs after every optimizer step, skipped or not: the
	// mixture-of-experts expert-bias update (nn.UpdateExpertBias), from the tokens
	// routed since the last one, as Megatron's finalize_model_grads does.
	afterStep func(ctx context.Context) error
}

// tiedGrad is a tied weight's copy and where its gradient lies.
type tiedGrad struct {
	p      *nn.Param
	buf    *optim.Buffer
	bucket int
}

// New makes rank mesh.Rank()'s trainer for the model parts built on it (GPTParts,
// BERTParts). It lays the parameters out in the optimizer's flat buffers (so build the
// model first and call New outside any scope of dev), splits the PP group into p2p
// channels (every rank of the mesh must call New) and hooks the gradients for
// data-parallel reduction. It returns the optimizer's configuration error or a
// communication error.
func New(ctx context.Context, mesh *parallel.Mesh, dev *tensor.Device, parts Parts, cfg Config) (*Trainer, error) {
	if cfg.Optim.Groups == (optim.Groups{}) {
		cfg.Optim.Groups = optim.MeshGroups(mesh)
	}
	if cfg.Optim.Trace == nil {
		cfg.Optim.Trace = cfg.Trace
	}
	t := &Trainer{mesh: mesh, dev: dev, parts: parts, cfg: cfg}
	if len(parts.Modules) > 0 { // mixture-of-experts routers count over the stage's tokens
		nn.SetRouterGlobalGroup(mesh.TPDPCP(), parts.Modules...)
		t.afterStep = func(ctx context.Context) error { return nn.UpdateExpertBias(ctx, mesh.TPDPCP(), parts.Modules...) }
	}
	var err error
	if t.opt, err = optim.New(parts.Params(), cfg.Optim); err != nil {
		return nil, err
	}
	if t.pipe, err = parallel.NewPipeline(ctx, mesh.PP(), dev, cfg.P2PShape); err != nil {
		return nil, err
	}
	for _, c := range parts.Chunks {
		leaves := make([]*tensor.Tensor, len(c))
		for i, p := range c {
			leaves[i] = p.Tensor // the optimizer's views, now
			if p.SequenceParallel {
				t.sp = append(t.sp, p)
			}
		}
		t.chunkLeaves = append(t.chunkLeaves, leaves)
	}
	deferred := map[*nn.Param]bool{}
	if mesh.Embedding() != nil && mesh.Embedding().Size() > 1 {
		for _, p := range parts.Tied {
			deferred[p] = true
		}
	}
	var gb []parallel.GradBucket
	for i, b := range t.opt.Buffers() {
		for k, bk := range b.Buckets {
			g := parallel.GradBucket{}
			for _, p := range bk.Params {
				g.Params = append(g.Params, p.Tensor)
				if deferred[p] {
					g.Deferred = true
					t.tied = append(t.tied, tiedGrad{p: p, buf: b, bucket: k})
				}
			}
			gb = append(gb, g)
			t.buckets = append(t.buckets, [2]int{i, k})
		}
	}
	t.sync = parallel.NewGradSync(gb, func(ctx context.Context, j int) error {
		return t.opt.ReduceBucket(ctx, t.buckets[j][0], t.buckets[j][1])
	}, cfg.Trace)
	return t, nil
}

// Optimizer returns the trainer's optimizer.
func (t *Trainer) Optimizer() *optim.Optimizer { return t.opt }

// Pipeline returns the trainer's pipeline.
func (t *Trainer) Pipeline() *parallel.Pipeline { return t.pipe }

// StepResult is what one training step reports.
type StepResult struct {
	// Loss is the step's loss: the mean of the micro-batch losses, averaged over DP, on
	// every rank.
	Loss float64
	// Losses are this DP replica's micro-batch losses, on the last pipeline stage only.
	Losses []float64
	optim.StepResult
}

// Step runs one training step: it zeroes the gradients, runs schedule s (fwd computes a
// micro-batch's forward pass through one chunk; see parallel.ForwardFunc), finishes the
// gradient reduction (FinishGradSync) and steps the optimizer. Under
// Optim.OverlapParamGather the updated parameters are all-gathered during the next
// Step's (or Eval's) forward passes: before reading them otherwise (saving, comparing),
// call Optimizer().FinishParamGather() on every rank. A panic (a failed
// collective inside autograd) is recovered into the returned error; after an error abort
// the job, as the groups are out of step.
func (t *Trainer) Step(ctx context.Context, s parallel.Schedule, fwd parallel.ForwardFunc) (res StepResult, err error) {
	defer recoverInto(&err)
	scope := t.dev.NewScope()
	defer scope.Close()
	t.opt.ZeroGrad()
	bufs := t.opt.Buffers()
	h := parallel.Hooks{
		ScaleLoss: t.opt.ScaleLoss,
		Trace:     t.cfg.Trace,
		LastBackward: func(chunk int) {
			if !t.cfg.NoOverlap {
				t.sync.Arm(ctx, t.chunkLeaves[chunk])
			}
		},
		// Fold each micro-batch's bf16/fp16 gradients into the fp32 main gradients (a no-op
		// for F32 and F64), except in the buckets already being reduced, which
		// ReduceBucket folds itself: every micro-batch is added in fp32, whatever the
		// schedule, as Megatron's main_grad hooks do.
		AfterBackward: func(int, int) {
			t.sync.Idle(func(j int) { bufs[t.buckets[j][0]].AccumulateGrads(t.buckets[j][1]) })
		},
	}
	res.Losses, err = t.pipe.Train(ctx, s, fwd, h)
	if err != nil {
		_ = t.sync.Finish(ctx) // stop the reducer; the step has failed anyway
		return res, err
	}
	if err := t.FinishGradSync(ctx); err != nil {
		return res, err
	}
	if res.StepResult, err = t.opt.Step(ctx); err != nil {
		return res, err
	}
	if t.afterStep != nil {
		if err := t.afterStep(ctx); err != nil {
			return res, err
		}
	}
	res.Loss, err = t.meanLoss(ctx, res.Losses)
	return res, err
}

// Eval runs the forward steps of s with gradient recording off and returns the mean
// micro-batch loss, averaged over DP, on every rank. It first completes a parameter
// all-gather left pending by the last Step (optim.Optimizer.FinishParamGather).
func (t *Trainer) Eval(ctx context.Context, s parallel.Schedule, fwd parallel.ForwardFunc) (loss float64, err error) {
	defer recoverInto(&err)
	if err := t.opt.FinishParamGather(); err != nil {
		return 0, err
	}
	scope := t.dev.NewScope()
	defer scope.Close()
	losses, err := t.pipe.Eval(ctx, s, fwd, t.cfg.Trace)
	if err != nil {
		return 0, err
	}
	return t.meanLoss(ctx, losses)
}

// FinishGradSync completes the gradients after a schedule, in Megatron's order: it waits
// for the data-parallel bucket reductions started during backward and runs the rest,
// except the buckets holding a tied embedding copy, whose gradient is first summed with
// the other copy's over the embedding group and then averaged over DP; finally the
// gradients of sequence-parallel parameters are summed over TP. Step calls it.
func (t *Trainer) FinishGradSync(ctx context.Context) error {
	if err := t.sync.Finish(ctx); err != nil {
		return err
	}
	if emb := t.mesh.Embedding(); len(t.tied) > 0 {
		for _, tg := range t.tied {
			start := time.Now()
			tg.buf.AccumulateGrads(tg.bucket)
			if err := emb.AllReduce(ctx, tg.buf.MainGrad(tg.p), parallel.Sum); err != nil {
				return fmt.Errorf("train: summing the gradients of %s over the embedding group: %w", tg.p.Name, err)
			}
			t.cfg.Trace.Record(start, parallel.EventSync, -1, 0)
		}
	}
	if err := t.opt.ReduceGrads(ctx); err != nil {
		return err
	}
	if tp := t.mesh.TP(); tp.Size() > 1 && len(t.sp) > 0 {
		start := time.Now()
		for _, p := range t.sp {
			if err := tp.AllReduce(ctx, t.mainGrad(p), parallel.Sum); err != nil {
				return fmt.Errorf("train: summing the sequence-parallel gradient of %s over TP: %w", p.Name, err)
			}
		}
		t.cfg.Trace.Record(start, parallel.EventSync, -1, 0)
	}
	return nil
}

// mainGrad returns p's main gradient in the optimizer's buffers.
func (t *Trainer) mainGrad(p *nn.Param) *tensor.Tensor {
	for _, b := range t.opt.Buffers() {
		if _, ok := b.Offset(p); ok {
			return b.MainGrad(p)
		}
	}
	panic(fmt.Sprintf("train: parameter %s is in no buffer", p.Name))
}

// meanLoss averages the last stage's losses over DP and hands the result to every stage.
func (t *Trainer) meanLoss(ctx context.Context, losses []float64) (float64, error) {
	mean := 0.0
	for _, l := range losses {
		mean += l
	}
	if len(losses) > 0 {
		mean /= float64(len(losses))
	}
	v := tensor.Scalar(t.dev, tensor.F64, mean)
	if t.mesh.IsLastStage() {
		if err := t.mesh.DP().AllReduce(ctx, v, parallel.Avg); err != nil {
			return 0, fmt.Errorf("train: averaging the loss over DP: %w", err)
		}
	}
	if err := t.mesh.PP().Broadcast(ctx, v, t.mesh.Sizes().PP-1); err != nil {
		return 0, fmt.Errorf("train: broadcasting the loss from the last stage: %w", err)
	}
	return v.Item(), nil
}

// recoverInto turns a panic into *err, keeping a *parallel.Error as it is.
func recoverInto(err *error) {
	p := recover()
	if p == nil {
		return
	}
	if e, ok := p.(error); ok {
		var pe *parallel.Error
		if errors.As(e, &pe) {
			*err = e
			return
		}
	}
	*err = fmt.Errorf("train: panic: %v\n%s", p, debug.Stack())
}
