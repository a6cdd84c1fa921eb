package loop

import (
	"context"
	"fmt"
	"time"

	"megago/data"
	"megago/examples/internal/ranks"
	"megago/examples/internal/report"
	"megago/examples/internal/settings"
	"megago/nn"
	"megago/parallel"
	"megago/tensor"
	"megago/train"
)

// Loop is one rank's training loop. Every rank of Mesh runs it with the same settings.
type Loop struct {
	Settings *settings.Common // --train-iters, --eval-interval, the micro-batches and their schedule
	Mesh     *parallel.Mesh
	Dev      *tensor.Device
	Trainer  *train.Trainer
	Dropout  tensor.RNG     // the dropout stream, keyed by iteration and sample (train.PassFor)
	Report   *report.Report // rank 0's; nil on the other ranks

	// Forward returns the forward step of iteration it (0-based, counted from the start
	// of training, not of this run) over this rank's micro-batches of it; pass(micro) is
	// micro-batch micro's training pass, with its dropout.
	Forward func(it int, pass func(micro int) *nn.Pass) (parallel.ForwardFunc, error)
	// Eval validates the model after iteration it (1-based) and reports the result; Run
	// calls it when Settings.EvalAfter(it). Nil: no validation.
	Eval func(it int) error
	// Save records that iteration it (1-based) is done and saves a checkpoint when one is
	// due or last is true: a ckpt.Checkpointer's Saved. Nil: nothing is saved.
	Save func(ctx context.Context, it int, last bool, rep *report.Report) error
}

// Result is what a run of the loop did.
type Result struct {
	Iterations  int       // completed, counted from the start of training
	Interrupted bool      // stopped early by ctx (Ctrl-C)
	Losses      []float64 // training loss of each iteration of this run
}

// Run runs iterations first+1, ..., Settings.TrainIters (1-based; first is the
// iteration a resumed run starts after). When ctx ends (Ctrl-C) on any rank, every rank
// stops after the same iteration; the collectives run under context.WithoutCancel(ctx),
// so none is cut off halfway.
func (l *Loop) Run(ctx context.Context, first int) (Result, error) {
	work := context.WithoutCancel(ctx)
	cfg, sched := l.Settings, l.Settings.Schedule()
	var res Result
	for it := first; it < cfg.TrainIters; it++ {
		stop, err := ranks.StopRequested(ctx, work, l.Mesh.World(), l.Dev)
		if err != nil {
			return res, err
		}
		if stop {
			res.Interrupted = true
			l.Report.Printf("interrupted: stopping after iteration %d on every rank\n", it)
			break
		}
		t0 := time.Now()
		pass := func(micro int) *nn.Pass {
			return train.PassFor(work, l.Mesh, l.Dropout, it, micro, cfg.MicroBatchSize, cfg.Microbatches)
		}
		fwd, err := l.Forward(it, pass)
		if err != nil {
			return res, err
		}
		step, err := l.Trainer.Step(work, sched, fwd)
		if err != nil {
			return res, fmt.Errorf("iteration %d: %w", it+1, err)
		}
		res.Iterations, res.Losses = it+1, append(res.Losses, step.Loss)
		l.Report.Step(it+1, step, time.Since(t0))
		if l.Save != nil {
			if err := l.Save(work, it+1, it+1 == cfg.TrainIters, l.Report); err != nil {
				return res, err
			}
		}
		if l.Eval != nil && cfg.EvalAfter(it+1) {
			if err := l.Eval(it + 1); err != nil {
				return res, err
			}
		}
	}
	return res, nil
}

// Batches takes the next m micro-batches from l: one iteration's on this DP rank.
func Batches[B any](l *data.Loader[B], m int) ([]B, error) {
	bs := make([]B, m)
	for i := range bs {
		var err error
		if bs[i], err = l.Next(); err != nil {
			return nil, fmt.Errorf("reading micro-batch %d: %w", i, err)
		}
	}
	return bs, nil
}
