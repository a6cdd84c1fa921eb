package settings

import (
	"fmt"
	"math"
)

// The checks of the float settings: NaN, infinities and values outside a flag's range
// are refused before any work, each with a message naming the flag and the value.

// NonNegativeNumbers returns a message for each flag of values (name → value) that is
// not a finite number ≥ 0, in the order of the names.
func NonNegativeNumbers(values map[string]float64) []string {
	return refuse(values, func(v float64) bool { return v >= 0 && !math.IsInf(v, 1) }, "%s must be a finite number ≥ 0, got %g")
}

// PositiveNumbers returns a message for each flag of values (name → value) that is not
// a finite number > 0, in the order of the names.
func PositiveNumbers(values map[string]float64) []string {
	return refuse(values, func(v float64) bool { return v > 0 && !math.IsInf(v, 1) }, "%s must be a finite number > 0, got %g")
}

// Fractions returns a message for each flag of values (name → value) outside [0, 1)
// (NaN included), in the order of the names: probabilities that must leave something
// (dropout) and Adam's β.
func Fractions(values map[string]float64) []string {
	return refuse(values, func(v float64) bool { return v >= 0 && v < 1 }, "%s %g is outside [0, 1)")
}

// refuse returns format(name, value) for each value that is not ok, in the order of the
// names.
func refuse(values map[string]float64, ok func(float64) bool, format string) []string {
	var errs []string
	for _, name := range sortedKeys(values) {
		if v := values[name]; !ok(v) {
			errs = append(errs, fmt.Sprintf(format, name, v))
		}
	}
	return errs
}

// checkNumbers checks the float settings of Common.
func (c *Common) checkNumbers() []string {
	errs := NonNegativeNumbers(map[string]float64{"--lr": c.LR, "--min-lr": c.MinLR, "--adam-eps": c.AdamEps,
		"--weight-decay": c.WeightDecay, "--clip-grad": c.ClipGrad, "--init-method-std": c.InitMethodStd,
		"--loss-scale": c.LossScale, "--exit-duration-in-mins": c.ExitDurationInMins})
	errs = append(errs, PositiveNumbers(map[string]float64{"--initial-loss-scale": c.InitialLossScale,
		"--min-loss-scale": c.MinLossScale})...)
	errs = append(errs, Fractions(map[string]float64{"--adam-beta1": c.AdamBeta1, "--adam-beta2": c.AdamBeta2,
		"--hidden-dropout": c.HiddenDropout, "--attention-dropout": c.AttentionDropout})...)
	if !(c.LRWarmupFraction >= 0 && c.LRWarmupFraction <= 1) {
		errs = append(errs, fmt.Sprintf("--lr-warmup-fraction %g is outside [0, 1]", c.LRWarmupFraction))
	}
	return errs
}

// Warnings returns the settings that work but are most likely mistakes, one message
// each; the training loop prints them before the first iteration.
func (c *Common) Warnings() []string {
	var w []string
	switch {
	case c.FP16 && c.LossScale > 0 && c.LossScale < 1:
		w = append(w, fmt.Sprintf("--loss-scale %g is below 1: it shrinks the fp16 gradients, which underflow to zero "+
			"and the loss does not move; use 0 (dynamic scaling) or a power of 2 such as 1024", c.LossScale))
	case !c.FP16 && c.LossScale > 0:
		w = append(w, fmt.Sprintf("--loss-scale %g has no effect without --fp16", c.LossScale))
	}
	return w
}
