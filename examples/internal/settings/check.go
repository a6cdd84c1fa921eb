package settings

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"megago/data"
	"megago/nn"
	"megago/optim"
	"megago/parallel"
	"megago/parallel/tcp"
	"megago/tensor"
)

// The settings' checks and what the run derives from them: the world layout, the
// pipeline schedule, the optimizer and data configurations.

// Check fills the derived settings and returns every common setting that cannot work,
// one message each. world is the TCP world size, or 0 to use --ranks. model returns
// the example's model configuration for nn's own checks (TransformerConfig.Validate),
// which run only when the flags' sizes divide as TP needs. An example appends its own
// messages and returns Error(messages).
func (c *Common) Check(world int, model func() nn.TransformerConfig) []string {
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	positive := map[string]int{"--num-layers": c.NumLayers, "--hidden-size": c.HiddenSize,
		"--num-attention-heads": c.NumAttentionHeads, "--seq-length": c.SeqLength,
		"--micro-batch-size": c.MicroBatchSize, "--train-iters": c.TrainIters, "--log-interval": c.LogInterval,
		"--tensor-model-parallel-size": c.TP, "--pipeline-model-parallel-size": c.PP, "--ranks": c.Ranks,
		"--context-parallel-size":        c.CP.Size,
		"--make-vocab-size-divisible-by": c.MakeVocabSizeDivisibleBy, "--loss-scale-window": c.LossScaleWindow,
		"--hysteresis": c.Hysteresis}
	for _, name := range sortedKeys(positive) {
		if positive[name] < 1 {
			bad("%s must be at least 1, got %d", name, positive[name])
		}
	}
	errs = append(errs, NonNegative(map[string]int{"--eval-interval": c.EvalInterval, "--eval-iters": c.EvalIters,
		"--lr-decay-iters": c.LRDecayIters, "--lr-warmup-iters": c.LRWarmupIters,
		"--global-batch-size": c.GlobalBatchSize, "--ffn-hidden-size": c.FFNHiddenSize,
		"--num-layers-per-virtual-pipeline-stage": c.LayersPerVirtualStage,
		"--max-position-embeddings":               c.MaxPositionEmbeddings, "--exit-interval": c.ExitInterval})...)
	errs = append(errs, c.checkNumbers()...)
	errs = append(errs, c.checkMegatron()...)
	if len(errs) > 0 { // the rest divides by these or hands them on to checks of its own
		return errs
	}
	if c.MaxPositionEmbeddings == 0 {
		c.MaxPositionEmbeddings = c.SeqLength
	}
	if c.MaxPositionEmbeddings < c.SeqLength {
		bad("--max-position-embeddings %d is less than --seq-length %d", c.MaxPositionEmbeddings, c.SeqLength)
	}
	layout := c.checkLayout(world)
	errs = append(errs, layout...)
	errs = append(errs, c.CP.Check(model(), c.TP, c.SeqLength, c.SequenceParallel)...)
	if len(layout) == 0 {
		errs = append(errs, c.checkSamples()...) // --train-samples, --rampup-batch-size
	}
	errs = append(errs, c.checkOptimizer()...)
	errs = append(errs, c.checkOverlap()...)
	errs = append(errs, c.checkModel(model)...)
	errs = append(errs, c.Flags.Check()...)
	if c.EvalOnly && c.EvalIters < 1 {
		bad("--eval-only needs --eval-iters of at least 1")
	}
	errs = append(errs, c.checkDevice()...)
	switch c.RecomputeGranularity {
	case "", "none", "full", "selective":
	default:
		bad("--recompute-granularity %q: want full or selective", c.RecomputeGranularity)
	}
	if _, err := data.ParseSplit(c.Split); err != nil {
		bad("--split: %v", err)
	}
	if _, _, err := c.Blend(); err != nil {
		bad("--data-path: %v", err)
	}
	return errs
}

// checkLayout checks the parallel sizes against the world and the batch sizes.
func (c *Common) checkLayout(world int) []string {
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	c.World = c.Ranks
	if world > 0 {
		if c.Ranks > 1 {
			bad("--ranks %d cannot be used under a launcher (WORLD_SIZE=%d is set): each process is one rank", c.Ranks, world)
		}
		c.World = world
	}
	if c.World%(c.TP*c.CP.Size*c.PP) != 0 {
		if c.CP.Size > 1 {
			bad("%d ranks do not divide into TP=%d × CP=%d × PP=%d", c.World, c.TP, c.CP.Size, c.PP)
		} else {
			bad("%d ranks do not divide into TP=%d × PP=%d", c.World, c.TP, c.PP)
		}
		return errs
	}
	c.DP = c.World / (c.TP * c.CP.Size * c.PP)
	if c.GlobalBatchSize == 0 {
		c.GlobalBatchSize = c.MicroBatchSize * c.DP
	}
	if c.GlobalBatchSize%(c.MicroBatchSize*c.DP) != 0 {
		bad("--global-batch-size %d is not a multiple of micro-batch size %d × DP %d", c.GlobalBatchSize, c.MicroBatchSize, c.DP)
		return errs
	}
	c.Microbatches = c.GlobalBatchSize / (c.MicroBatchSize * c.DP)
	c.Chunks = 1
	if n := c.LayersPerVirtualStage; n > 0 {
		if c.PP < 2 {
			bad("--num-layers-per-virtual-pipeline-stage needs --pipeline-model-parallel-size of at least 2")
		} else if c.NumLayers%(c.PP*n) != 0 || c.NumLayers/(c.PP*n) < 2 {
			bad("--num-layers %d must be a multiple of PP %d × %d layers per virtual stage, with at least 2 chunks per rank", c.NumLayers, c.PP, n)
		} else {
			c.Chunks = c.NumLayers / (c.PP * n)
			if _, err := c.Schedule().Plan(c.PP, 0); err != nil {
				bad("%v (micro-batches per iteration: global batch %d / (micro-batch %d × DP %d))", err, c.GlobalBatchSize, c.MicroBatchSize, c.DP)
			}
		}
	} else if c.NumLayers%c.PP != 0 {
		bad("--num-layers %d is not divisible by --pipeline-model-parallel-size %d", c.NumLayers, c.PP)
	}
	if c.SequenceParallel && c.SeqLength%c.TP != 0 && c.CP.Size == 1 { // CP.Check says it under CP
		bad("--sequence-parallel: --seq-length %d is not divisible by TP %d", c.SeqLength, c.TP)
	}
	return errs
}

// checkOptimizer checks the learning-rate schedule and precision settings.
func (c *Common) checkOptimizer() []string {
	var errs []string
	if c.BF16 && c.FP16 {
		errs = append(errs, "--bf16 and --fp16 are exclusive")
	}
	if c.Set["lr-warmup-iters"] && c.Set["lr-warmup-fraction"] {
		errs = append(errs, "--lr-warmup-iters and --lr-warmup-fraction are exclusive")
	}
	if c.FP16 && c.LossScale == 0 && c.MinLossScale > c.InitialLossScale {
		errs = append(errs, fmt.Sprintf("--min-loss-scale %g is above --initial-loss-scale %g", c.MinLossScale, c.InitialLossScale))
		return errs
	}
	if _, err := c.OptimConfig(); err != nil {
		errs = append(errs, err.Error())
	}
	return errs
}

// checkModel checks the model against the TP size, in the flags' words, then
// everything else nn checks.
func (c *Common) checkModel(model func() nn.TransformerConfig) []string {
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	if c.HiddenSize%c.NumAttentionHeads != 0 && model().HeadSize == 0 { // --kv-channels allows it
		bad("--hidden-size %d is not divisible by --num-attention-heads %d", c.HiddenSize, c.NumAttentionHeads)
	}
	if c.NumAttentionHeads%c.TP != 0 {
		bad("--num-attention-heads %d is not divisible by --tensor-model-parallel-size %d", c.NumAttentionHeads, c.TP)
	}
	if ffn := cmp.Or(c.FFNHiddenSize, 4*c.HiddenSize); ffn%c.TP != 0 {
		bad("the MLP hidden size %d (--ffn-hidden-size, default 4 × hidden) is not divisible by --tensor-model-parallel-size %d", ffn, c.TP)
	}
	if len(errs) > 0 {
		return errs
	}
	mc := model()
	mc.TP = c.TP
	if err := mc.Validate(); err != nil {
		return []string{err.Error()}
	}
	return nil
}

// NonNegative returns a message for each flag of values (name → value) that is
// negative, in the order of the names.
func NonNegative(values map[string]int) []string {
	var errs []string
	for _, name := range sortedKeys(values) {
		if values[name] < 0 {
			errs = append(errs, fmt.Sprintf("%s must not be negative, got %d", name, values[name]))
		}
	}
	return errs
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Error returns the messages as one error (nil for none).
func Error(errs []string) error {
	if len(errs) == 0 {
		return nil
	}
	if len(errs) == 1 {
		return errors.New(errs[0])
	}
	return errors.New("invalid settings:\n  " + strings.Join(errs, "\n  "))
}

// Schedule returns the pipeline schedule of one training iteration: gradient
// accumulation over the micro-batches on one stage, 1F1B on several, interleaved 1F1B
// with virtual stages.
func (c *Common) Schedule() parallel.Schedule {
	switch {
	case c.Chunks > 1:
		return parallel.Interleaved{M: c.Microbatches, V: c.Chunks}
	case c.PP > 1:
		return parallel.OneFOneB{M: c.Microbatches}
	}
	return parallel.NoPipelining{M: c.Microbatches}
}

// Recompute returns the --recompute-granularity setting.
func (c *Common) Recompute() nn.Recompute {
	switch c.RecomputeGranularity {
	case "full":
		return nn.RecomputeFull
	case "selective":
		return nn.RecomputeSelective
	}
	return nn.RecomputeNone
}

// OptimConfig returns AdamW with Megatron's learning-rate schedule.
func (c *Common) OptimConfig() (optim.Config, error) {
	decay := map[string]optim.DecayStyle{"constant": optim.DecayConstant, "linear": optim.DecayLinear,
		"cosine": optim.DecayCosine, "inverse-square-root": optim.DecayInverseSqrt}
	style, ok := decay[c.LRDecayStyle]
	if !ok {
		return optim.Config{}, fmt.Errorf("--lr-decay-style %q: want constant, linear, cosine or inverse-square-root", c.LRDecayStyle)
	}
	warmup, decayIters := c.scheduleSteps() // iterations, or samples with --train-samples
	sched, err := optim.NewSchedule(optim.ScheduleConfig{MaxLR: c.LR, MinLR: c.MinLR, WarmupSteps: warmup,
		DecaySteps: decayIters, Decay: style, StartWD: c.WeightDecay, EndWD: c.WeightDecay})
	if err != nil {
		return optim.Config{}, fmt.Errorf("learning-rate schedule: %w", err)
	}
	cfg := optim.Config{Rule: optim.AdamW{Beta1: c.AdamBeta1, Beta2: c.AdamBeta2, Eps: c.AdamEps},
		Schedule: sched, ClipGrad: c.ClipGrad, Distributed: c.DistributedOptimizer}
	c.overlapOptim(&cfg)
	if c.FP16 {
		if c.LossScale > 0 {
			cfg.Scaler = optim.ConstantScaler{Value: c.LossScale}
		} else if cfg.Scaler, err = optim.NewDynamicScaler(c.ScalerConfig()); err != nil {
			return optim.Config{}, err
		}
	}
	return cfg, cfg.Validate()
}

// ScalerConfig returns the dynamic fp16 loss scaler's configuration.
func (c *Common) ScalerConfig() optim.DynamicScalerConfig {
	return optim.DynamicScalerConfig{InitialScale: c.InitialLossScale, MinScale: c.MinLossScale,
		GrowthInterval: c.LossScaleWindow, Hysteresis: c.Hysteresis}
}

// Blend returns the --data-path prefixes and their weights (nil when none are given:
// the datasets are then blended by their sizes).
func (c *Common) Blend() (prefixes []string, weights []float64, err error) {
	return ParseBlend(c.DataPath)
}

// Cache returns --data-cache-path (alias --cache-dir) or the user cache directory's
// megago folder.
func (c *Common) Cache() (string, error) {
	if c.CacheDir != "" {
		return c.CacheDir, nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no cache directory (%v): set --data-cache-path", err)
	}
	return filepath.Join(d, "megago"), nil
}

// TCPWorld returns the world size of a TCP job, or 0 for none.
func TCPWorld(t *tcp.Config) int {
	if t == nil {
		return 0
	}
	return t.WorldSize
}

// DType returns the parameters' and activations' dtype.
func (c *Common) DType() tensor.DType {
	switch {
	case c.BF16:
		return tensor.BF16
	case c.FP16:
		return tensor.F16
	}
	return tensor.F32
}

// WarmupIters returns the learning-rate warmup in iterations (under --train-samples,
// the warmup samples in whole global batches).
func (c *Common) WarmupIters() int {
	if c.SampleBased() {
		w, _ := c.scheduleSteps()
		return w / max(c.GlobalBatchSize, 1)
	}
	if c.Set["lr-warmup-iters"] {
		return c.LRWarmupIters
	}
	decay := c.LRDecayIters
	if decay == 0 {
		decay = c.TrainIters
	}
	return int(math.Round(c.LRWarmupFraction * float64(decay)))
}

// EvalAfter reports whether to validate after iteration it (1-based): every
// --eval-interval iterations, after the last, and after one a planned exit stops the
// run after (exited; megago tune reads that validation at each rung).
func (c *Common) EvalAfter(it int, exited bool) bool {
	return c.EvalIters > 0 && (exited || it == c.TrainIters || c.EvalInterval > 0 && it%c.EvalInterval == 0)
}

// FLOPs returns the model FLOPs of one iteration of a transformer with a vocabulary
// (padded) of vp ids, as nn.TrainingFLOPs counts them: tokens × (6·N + 12·L·T·C), with
// N = L·(4C² + 2C·F) + Vp·C the weights used in matrix multiplies.
func (c *Common) FLOPs(vp int) float64 {
	m := nn.TransformerConfig{NumLayers: c.NumLayers, Hidden: c.HiddenSize, FFNHidden: c.FFNHiddenSize}
	return nn.TrainingFLOPs(m, vp, c.GlobalBatchSize, c.SeqLength)
}
