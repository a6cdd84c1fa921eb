package settings

import (
	"fmt"
	"strconv"
	"strings"
)

// What a run prints at start-up so that a script ported from Megatron-LM never trains
// differently without saying so: every setting whose value differs from Megatron's
// default, whether megago's default or given.

// megatronDefault is one setting with a Megatron default: its flag, Megatron's value as
// Megatron's help would print it (or what Megatron does without it), and this run's.
type megatronDefault struct {
	flag, megatron string
	value          func(c *Common) string
}

// megatronDefaults lists the settings of Common whose Megatron default is fixed, from
// megatron/training/arguments.py, training_config.py and core's TransformerConfig.
// Flags Megatron requires (--seq-length, --micro-batch-size, --train-iters or
// --train-samples, --lr) are listed when megago's default was used instead.
var megatronDefaults = []megatronDefault{
	{"hidden-dropout", "0.1", func(c *Common) string { return num(c.HiddenDropout) }},
	{"attention-dropout", "0.1", func(c *Common) string { return num(c.AttentionDropout) }},
	{"init-method-std", "0.02", func(c *Common) string { return num(c.InitMethodStd) }},
	{"adam-beta1", "0.9", func(c *Common) string { return num(c.AdamBeta1) }},
	{"adam-beta2", "0.999", func(c *Common) string { return num(c.AdamBeta2) }},
	{"adam-eps", "1e-08", func(c *Common) string { return num(c.AdamEps) }},
	{"weight-decay", "0.01", func(c *Common) string { return num(c.WeightDecay) }},
	{"clip-grad", "1", func(c *Common) string { return num(c.ClipGrad) }},
	{"lr-decay-style", "linear", func(c *Common) string { return c.LRDecayStyle }},
	{"min-lr", "0", func(c *Common) string { return num(c.MinLR) }},
	{"lr-warmup", "none", func(c *Common) string { return c.warmupWords() }},
	{"split", "969,30,1", func(c *Common) string { return strings.ReplaceAll(c.Split, " ", "") }},
	{"seed", "1234", func(c *Common) string { return strconv.FormatUint(c.Seed, 10) }},
	{"make-vocab-size-divisible-by", "128", func(c *Common) string { return strconv.Itoa(c.MakeVocabSizeDivisibleBy) }},
	{"initial-loss-scale", "4.294967296e+09", func(c *Common) string { return num(c.InitialLossScale) }},
	{"min-loss-scale", "1", func(c *Common) string { return num(c.MinLossScale) }},
	{"loss-scale-window", "1000", func(c *Common) string { return strconv.Itoa(c.LossScaleWindow) }},
	{"hysteresis", "2", func(c *Common) string { return strconv.Itoa(c.Hysteresis) }},
	{"eval-iters", "100", func(c *Common) string { return strconv.Itoa(c.EvalIters) }},
	{"log-interval", "100", func(c *Common) string { return strconv.Itoa(c.LogInterval) }},
	{"seq-length", "required", func(c *Common) string { return strconv.Itoa(c.SeqLength) }},
	{"micro-batch-size", "required", func(c *Common) string { return strconv.Itoa(c.MicroBatchSize) }},
	{"train-iters", "required", func(c *Common) string { return strconv.Itoa(c.TrainIters) }},
	{"lr", "required", func(c *Common) string { return num(c.LR) }},
}

func num(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// warmupWords returns the learning-rate warmup as the flags give it; "none" without one.
func (c *Common) warmupWords() string {
	switch {
	case c.Set["lr-warmup-samples"]:
		return fmt.Sprintf("--lr-warmup-samples %d", c.LRWarmupSamples)
	case c.Set["lr-warmup-iters"]:
		return fmt.Sprintf("--lr-warmup-iters %d", c.LRWarmupIters)
	case c.LRWarmupFraction > 0:
		return fmt.Sprintf("--lr-warmup-fraction %s", num(c.LRWarmupFraction))
	}
	return "none"
}

// given reports whether flag was given (for lr-warmup: any of its flags).
func (c *Common) given(flag string) bool {
	if flag == "lr-warmup" {
		return c.Set["lr-warmup-fraction"] || c.Set["lr-warmup-iters"] || c.Set["lr-warmup-samples"]
	}
	if flag == "train-iters" {
		return c.Set["train-iters"] || c.Set["train-samples"]
	}
	return c.Set[flag]
}

// MegatronDefaults returns one block, ending in a newline, naming every setting whose
// value differs from Megatron-LM's default, with Megatron's value in parentheses and
// "*" on the ones given on the command line or in --config; "" when none differs. A
// setting Megatron requires is named only when megago's default stood in for it. The
// training loop prints it before the first iteration.
func (c *Common) MegatronDefaults() string {
	var items []string
	for _, d := range megatronDefaults {
		v, given := d.value(c), c.given(d.flag)
		if d.megatron == "required" && given || d.megatron != "required" && v == d.megatron {
			continue
		}
		mark := ""
		if given {
			mark = "*"
		}
		name := "--" + d.flag + " "
		if d.flag == "lr-warmup" {
			name = "" // the words name the flag
		}
		items = append(items, fmt.Sprintf("%s%s%s (%s)", mark, name, v, d.megatron))
	}
	if len(items) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("settings that differ from Megatron-LM's defaults (Megatron's in parentheses, * given):\n")
	line := " "
	for i, it := range items {
		if len(line)+len(it) > 100 && line != " " {
			b.WriteString(strings.TrimRight(line, " ") + "\n")
			line = " "
		}
		line += " " + it
		if i < len(items)-1 {
			line += ","
		}
	}
	b.WriteString(line + "\n")
	return b.String()
}
