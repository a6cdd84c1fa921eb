package main

import (
	"context"
	"flag"
	"fmt"

	"megago/checkpoint"
	"megago/nn"
	"megago/parallel"
	"megago/tensor"
	"megago/train"
)

// Checkpoints, with Megatron's flags: --save and --save-interval write the whole training
// state (model, optimizer, schedule, loss scaler, data position) every so many
// iterations and at the end; --load resumes from it — at any TP, PP and DP, the
// checkpoint is resharded on loading — --finetune takes only its weights, and
// --eval-only reports the loaded model's validation loss and perplexity. A run stopped
// by Ctrl-C is not saved: its last --save-interval checkpoint is the one to resume.

// checkpointFlags are the checkpoint settings.
type checkpointFlags struct {
	Save         string
	SaveInterval int
	Load         string
	Finetune     bool
	EvalOnly     bool
}

func (c *checkpointFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.Save, "save", "", "directory to save checkpoints to (iter_NNNNNNN/ and latest_checkpointed_iteration.txt)")
	fs.IntVar(&c.SaveInterval, "save-interval", 0, "iterations between checkpoints (0: only at the end of the run)")
	fs.StringVar(&c.Load, "load", "", "directory of a checkpoint to resume from (any TP, PP and DP)")
	fs.BoolVar(&c.Finetune, "finetune", false, "load only the weights of --load and start at iteration 0 with a new optimizer")
	fs.BoolVar(&c.EvalOnly, "eval-only", false, "load --load, report its validation loss and perplexity, and stop")
}

// check reports settings that cannot work together.
func (c *checkpointFlags) check() []string {
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
	return errs
}

// checkpointer saves and restores one rank's training state.
type checkpointer struct {
	cfg    *config
	mesh   *parallel.Mesh
	st     *checkpoint.State
	loaded int    // the iteration of the checkpoint loaded
	note   string // what was loaded, for the report
}

func newCheckpointer(cfg *config, mesh *parallel.Mesh, model nn.GPTConfig, parts train.Parts, trainer *train.Trainer) *checkpointer {
	return &checkpointer{cfg: cfg, mesh: mesh, st: &checkpoint.State{Model: checkpoint.GPTModel(model),
		Params: parts.Params(), Optimizer: trainer.Optimizer(), Seed: cfg.Seed}}
}

// load restores --load (the weights only with --finetune or --eval-only) and returns the
// iteration to start from. samples is the size of the training split.
func (c *checkpointer) load(ctx context.Context, samples int) (int, error) {
	if c.cfg.Load == "" {
		return 0, nil
	}
	weightsOnly := c.cfg.Finetune || c.cfg.EvalOnly
	m, err := checkpoint.Load(ctx, c.cfg.Load, c.mesh, c.st, checkpoint.LoadOptions{WeightsOnly: weightsOnly})
	if err != nil {
		return 0, err
	}
	c.loaded = m.Iteration
	what := "resumed from"
	switch {
	case weightsOnly:
		what = "loaded the weights of"
		c.st.Iteration, c.st.ConsumedSamples = 0, 0
	case m.Seed != c.cfg.Seed:
		return 0, fmt.Errorf("--load %s was trained with --seed %d; resume it with the same seed", c.cfg.Load, m.Seed)
	case c.st.ConsumedSamples > samples:
		return 0, fmt.Errorf("--load %s has consumed %d samples, more than the %d of the training split", c.cfg.Load, c.st.ConsumedSamples, samples)
	}
	c.note = fmt.Sprintf("checkpoint: %s %s, iteration %d (saved at TP %d × PP %d × DP %d)\n", what, c.cfg.Load,
		m.Iteration, m.Layout.TP, m.Layout.PP, m.Layout.DP)
	return c.st.Iteration, nil
}

// report prints what was loaded.
func (c *checkpointer) report(rep *report) {
	if c.note != "" {
		rep.printf("%s", c.note)
	}
}

// saved records that iteration it (1-based) is done and saves at --save-interval, or
// always when last.
func (c *checkpointer) saved(ctx context.Context, it int, last bool, rep *report) error {
	c.st.Iteration = it
	c.st.ConsumedSamples += c.cfg.GlobalBatchSize
	if c.cfg.Save == "" || !last && (c.cfg.SaveInterval == 0 || it%c.cfg.SaveInterval != 0) {
		return nil
	}
	if err := checkpoint.Save(ctx, c.cfg.Save, c.mesh, c.st); err != nil {
		return fmt.Errorf("saving iteration %d: %w", it, err)
	}
	rep.printf("checkpoint: saved iteration %d to %s\n", it, c.cfg.Save)
	return nil
}

// evalOnly reports the validation loss of the loaded model (--eval-only).
func evalOnly(ctx context.Context, cfg *config, corp *corpus, c *checkpointer, trainer *train.Trainer, chunks []*nn.GPT, dev *tensor.Device, rep *report) (*summary, error) {
	loss, err := validate(ctx, cfg, corp, c.mesh, trainer, chunks, dev)
	if err != nil {
		return nil, err
	}
	rep.eval(c.loaded, loss)
	return &summary{ValidLoss: loss, Entropy: corp.entropy()}, c.mesh.World().Barrier(ctx)
}
