package ckpt

import (
	"context"
	"flag"
	"fmt"

	"megago/checkpoint"
	"megago/examples/internal/report"
	"megago/nn"
	"megago/parallel"
	"megago/train"
)

// Flags are the checkpoint settings.
type Flags struct {
	Save         string
	SaveInterval int
	Load         string
	Finetune     bool
	EvalOnly     bool
	// NoLoadOptim resumes --load's weights, iteration and data position with a new
	// optimizer (state and learning-rate schedule from step 0), as Megatron's
	// --no-load-optim; NoLoadRNG resumes without its random state: with this run's
	// --seed (megago's dropout and data order are keyed by the seed, which is all the
	// random state a checkpoint holds).
	NoLoadOptim, NoLoadRNG bool
}

// Register adds the flags to fs; evalOnly says what --eval-only reports.
func (c *Flags) Register(fs *flag.FlagSet, evalOnly string) {
	fs.StringVar(&c.Save, "save", "", "directory to save checkpoints to (iter_NNNNNNN/ and latest_checkpointed_iteration.txt)")
	fs.IntVar(&c.SaveInterval, "save-interval", 0, "iterations between checkpoints (0: only at the end of the run)")
	fs.StringVar(&c.Load, "load", "", "directory of a checkpoint to resume from (any TP, CP, PP and DP)")
	fs.BoolVar(&c.Finetune, "finetune", false, "load only the weights of --load and start at iteration 0 with a new optimizer")
	fs.BoolVar(&c.EvalOnly, "eval-only", false, "load --load, report "+evalOnly+", and stop")
	fs.BoolVar(&c.NoLoadOptim, "no-load-optim", false, "resume --load's weights, iteration and data position with a new optimizer: its state and the learning-rate schedule (warmup included) start again")
	fs.BoolVar(&c.NoLoadRNG, "no-load-rng", false, "resume --load with this run's --seed (dropout, and the data order of the datasets built) instead of the checkpoint's")
}

// Check reports settings that cannot work together.
func (c *Flags) Check() []string {
	var errs []string
	switch {
	case c.SaveInterval < 0:
		errs = append(errs, fmt.Sprintf("--save-interval must not be negative, got %d", c.SaveInterval))
	case c.SaveInterval > 0 && c.Save == "":
		errs = append(errs, "--save-interval needs --save")
	}
	if (c.Finetune || c.EvalOnly) && c.Load == "" {
		errs = append(errs, "--finetune and --eval-only need --load")
	}
	if (c.NoLoadOptim || c.NoLoadRNG) && c.Load == "" {
		errs = append(errs, "--no-load-optim and --no-load-rng need --load")
	}
	return errs
}

// LockSave takes --save's job lock (checkpoint.LockDir) in the process that holds world
// rank 0 (rank0), so that a second job given the same --save refuses to start, naming
// the directory and the process id of the job that has it. Call it before training and
// unlock when the job ends; without --save, with --eval-only or on other processes it
// takes nothing.
func (c *Flags) LockSave(rank0 bool) (unlock func() error, err error) {
	if c.Save == "" || c.EvalOnly || !rank0 {
		return func() error { return nil }, nil
	}
	if unlock, err = checkpoint.LockDir(c.Save); err != nil {
		return nil, fmt.Errorf("--save: %w", err)
	}
	return unlock, nil
}

// Checkpointer saves and restores one rank's training state.
type Checkpointer struct {
	f           *Flags
	mesh        *parallel.Mesh
	globalBatch func(it int) int
	// State is what is saved: its ConsumedSamples is where the data loader starts.
	State *checkpoint.State
	// Loaded is the iteration of the checkpoint loaded (0: none).
	Loaded int
	note   string // what was loaded, for the report
	saved  int    // the iteration last saved to --save by this run (0: none)
}

// New returns the Checkpointer of a model (model names its architecture and
// configuration) trained by trainer with parts and seed; globalBatch(it) is the number of
// samples iteration it (0-based) consumes (settings.Common.GlobalBatchAt).
func New(f *Flags, mesh *parallel.Mesh, model checkpoint.Model, parts train.Parts, trainer *train.Trainer, seed uint64, globalBatch func(it int) int) *Checkpointer {
	return &Checkpointer{f: f, mesh: mesh, globalBatch: globalBatch, State: &checkpoint.State{Model: model,
		Params: parts.Params(), Tensors: nn.ModuleState(parts.Modules...), Optimizer: trainer.Optimizer(), Seed: seed}}
}

// Load restores --load (the weights only with --finetune or --eval-only) and returns the
// iteration to start from. samples is the size of the training split.
func (c *Checkpointer) Load(ctx context.Context, samples int) (int, error) {
	if c.f.Load == "" {
		return 0, nil
	}
	weightsOnly := c.f.Finetune || c.f.EvalOnly
	seed := c.State.Seed
	m, err := checkpoint.Load(ctx, c.f.Load, c.mesh, c.State, checkpoint.LoadOptions{WeightsOnly: weightsOnly || c.f.NoLoadOptim})
	if err != nil {
		return 0, err
	}
	c.Loaded = m.Iteration
	what := "resumed from"
	if c.f.NoLoadOptim && !weightsOnly { // the weights only were loaded: take the position too
		what = "resumed (with a new optimizer, --no-load-optim) from"
		c.State.Iteration, c.State.ConsumedSamples, c.State.Extra = m.Iteration, m.ConsumedSamples, m.Extra
	}
	if c.f.NoLoadRNG {
		c.State.Seed = seed
	}
	switch {
	case weightsOnly:
		what = "loaded the weights of"
		c.State.Iteration, c.State.ConsumedSamples = 0, 0
	case m.Seed != seed && !c.f.NoLoadRNG:
		return 0, fmt.Errorf("--load %s was trained with --seed %d; resume it with the same seed, or give --no-load-rng", c.f.Load, m.Seed)
	case c.State.ConsumedSamples > samples:
		return 0, fmt.Errorf("--load %s has consumed %d samples, more than the %d of the training split", c.f.Load, c.State.ConsumedSamples, samples)
	}
	c.note = fmt.Sprintf("checkpoint: %s %s, iteration %d (saved at %v)\n", what, c.f.Load, m.Iteration, m.Layout)
	return c.State.Iteration, nil
}

// Report prints what was loaded, if anything.
func (c *Checkpointer) Report(rep *report.Report) {
	if c.note != "" {
		rep.Printf("%s", c.note)
	}
}

// Saved records that iteration it (1-based) is done and saves at --save-interval, or
// always when last, saying so on rep. Weights that hold a NaN or an infinity on any
// rank are not saved: Saved returns an error instead, on every rank, and the latest
// checkpoint stays the one before.
func (c *Checkpointer) Saved(ctx context.Context, it int, last bool, rep *report.Report) error {
	c.State.Iteration = it
	c.State.ConsumedSamples += c.globalBatch(it - 1)
	if c.f.Save == "" || !last && (c.f.SaveInterval == 0 || it%c.f.SaveInterval != 0) {
		return nil
	}
	if err := c.State.Optimizer.FinishParamGather(); err != nil { // whole weights (--overlap-param-gather)
		return err
	}
	if err := c.checkFinite(ctx, it); err != nil {
		return err
	}
	if err := checkpoint.Save(ctx, c.f.Save, c.mesh, c.State); err != nil {
		return fmt.Errorf("saving iteration %d: %w", it, err)
	}
	c.saved = it
	rep.Printf("checkpoint: saved iteration %d to %s\n", it, c.f.Save)
	return nil
}
