package loop

import (
	"context"
	"fmt"
	"time"

	"megago/data"
	"megago/examples/internal/report"
	"megago/examples/internal/settings"
	"megago/nn"
	"megago/parallel"
	"megago/tensor"
	"megago/train"
)

// Loop is one rank's training loop. Every rank of Mesh runs it with the same settings.
type Loop struct {
	Settings *settings.Common // --train-iters, --eval-interval, the micro-batches and their schedule, the exits
	Mesh     *parallel.Mesh
	Dev      *tensor.Device
	Trainer  *train.Trainer
	Dropout  tensor.RNG     // the dropout stream, keyed by iteration and sample (train.PassFor)
	Report   *report.Report // rank 0's; nil on the other ranks
	// Start is when the run started, from which --exit-duration-in-mins counts; zero
	// means when Run is called.
	Start time.Time
	// Forward returns the forward step of iteration it (0-based, counted from the start
	// of training, not of this run) over this rank's Settings.MicrobatchesAt(it)
	// micro-batches of it; pass(micro) is micro-batch micro's training pass, with its
	// dropout.
	Forward func(it int, pass func(micro int) *nn.Pass) (parallel.ForwardFunc, error)
	// Eval validates the model after iteration it (1-based) and reports the result; Run
	// calls it when Settings.EvalAfter(it, exited): every --eval-interval iterations,
	// after the last, and after the one a planned exit (--exit-interval,
	// --exit-duration-in-mins) stops at, with --eval-iters > 0. Nil: no validation.
	Eval func(it int) error
	// Save records that iteration it (1-based) is done and saves a checkpoint when one is
	// due or last is true: a ckpt.Checkpointer's Saved. Nil: nothing is saved.
	Save func(ctx context.Context, it int, last bool, rep *report.Report) error
	// MoE, for a model with mixture-of-experts layers, says what to log of them after
	// each step (moe.go): their losses and expert loads, reduced over every rank. Nil:
	// a dense model.
	MoE *MoELog
}

// Result is what a run of the loop did.
type Result struct {
	Iterations  int       // completed, counted from the start of training
	Interrupted bool      // stopped early by ctx (Ctrl-C, SIGTERM)
	Exited      bool      // stopped early by --exit-interval or --exit-duration-in-mins
	Losses      []float64 // training loss of each iteration of this run
}

// Stopped reports whether the run stopped before --train-iters: interrupted, or a
// planned exit.
func (r Result) Stopped() bool { return r.Interrupted || r.Exited }

// Run runs iterations first+1, ..., Settings.TrainIters (1-based; first is the
// iteration a resumed run starts after), after printing Settings.Warnings. When ctx
// ends (Ctrl-C, SIGTERM) on any rank, every rank stops after the same iteration, saved
// with --exit-signal-handler; --exit-interval and --exit-duration-in-mins stop it too,
// saving that iteration. The collectives run under context.WithoutCancel(ctx), so none
// is cut off halfway. A loss that is not finite, or an fp16 loss scaler that gives up
// (see health), ends Run with an error before that iteration is saved. Run leaves the
// parameters whole: under --overlap-param-gather it completes the gather the last
// iteration left to the next forward pass (so does each validation and save).
func (l *Loop) Run(ctx context.Context, first int) (Result, error) {
	res, err := l.run(ctx, first)
	if err == nil {
		err = l.Trainer.Optimizer().FinishParamGather()
	}
	return res, err
}

// run is Run without completing the parameter all-gather.
func (l *Loop) run(ctx context.Context, first int) (Result, error) {
	work := context.WithoutCancel(ctx)
	start := l.Start
	if start.IsZero() {
		start = time.Now()
	}
	l.Report.Printf("%s", l.Settings.MegatronDefaults())
	for _, w := range l.Settings.Warnings() {
		l.Report.Printf("warning: %s\n", w)
	}
	var res Result
	if first >= l.Settings.TrainIters {
		return res, nil
	}
	s, err := l.stopAfter(ctx, work, first, start, false)
	if err != nil {
		return res, err
	}
	if l.announce(first, s, &res); res.Stopped() {
		return res, nil // before any iteration of this run: nothing new to save
	}
	h := newHealth(l.Settings)
	for it := first; it < l.Settings.TrainIters; it++ {
		stopped, err := l.iteration(ctx, work, it, start, h, &res)
		if err != nil || stopped {
			return res, err
		}
	}
	return res, nil
}

// iteration runs iteration it (0-based), then its checks, the decision to stop, the
// save and the validation; it reports whether the run stops after it.
func (l *Loop) iteration(ctx, work context.Context, it int, start time.Time, h *health, res *Result) (bool, error) {
	cfg := l.Settings
	t0 := time.Now()
	m := cfg.MicrobatchesAt(it) // grows under --rampup-batch-size
	pass := func(micro int) *nn.Pass {
		return l.Trainer.PassFor(work, l.Dropout, it, micro, cfg.MicroBatchSize, m)
	}
	fwd, err := l.Forward(it, pass)
	if err != nil {
		return false, err
	}
	l.Trainer.Optimizer().SetScheduleIncrement(cfg.ScheduleIncrement(it)) // samples under --train-samples
	if l.MoE != nil {
		l.MoE.Stats() // drop what a validation or generation since the last step recorded
	}
	step, err := l.Trainer.Step(work, cfg.ScheduleAt(it), fwd)
	var moe *report.MoE
	if err == nil && l.MoE != nil {
		moe, err = l.MoE.reduce(work, l.Mesh, l.Dev)
	}
	if err == nil {
		err = l.Report.Step(it+1, step, time.Since(t0), moe)
	}
	if err == nil {
		err = h.check(step)
	}
	if err != nil {
		return false, fmt.Errorf("iteration %d: %w", it+1, err)
	}
	res.Iterations, res.Losses = it+1, append(res.Losses, step.Loss)

	var s stop
	last := it+1 == cfg.TrainIters
	if !last {
		if s, err = l.stopAfter(ctx, work, it+1, start, true); err != nil {
			return false, err
		}
	}
	save := l.announce(it+1, s, res) || last
	if l.Save != nil {
		if err := l.Save(work, it+1, save, l.Report); err != nil {
			return false, err
		}
	}
	if l.Eval != nil && cfg.EvalAfter(it+1, res.Exited) {
		if err := l.Trainer.Optimizer().FinishParamGather(); err != nil {
			return false, err
		}
		if err := l.Eval(it + 1); err != nil {
			return false, err
		}
		if err := l.Report.Err(); err != nil {
			return false, fmt.Errorf("validation after iteration %d: %w", it+1, err)
		}
	}
	return res.Stopped(), nil
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
