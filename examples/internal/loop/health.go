package loop

import (
	"fmt"
	"math"

	"megago/examples/internal/settings"
	"megago/train"
)

// health watches the training steps for divergence, which stops a run before the
// iteration is saved: a training loss that is NaN or infinite (Megatron's
// --check-for-nan-in-loss-and-grad, on unless --no-check-for-nan-in-loss-and-grad), and
// an fp16 dynamic loss scaler that has nothing left to try. A run of skipped steps (inf/NaN
// gradients) that starts at scale S brings the scale down to --min-loss-scale in
// log2(S / min) + hysteresis − 1 skips (the first hysteresis − 1 keep S, each further one
// halves it); the run stops when the skips in a row reach log2(S / min) + hysteresis + 1,
// that is when the second step in a row at the minimum scale overflows too.
//
// Every rank decides alike: the loss, the skip and the loss scale of a step are the
// same on every rank.
type health struct {
	checkLoss  bool
	minScale   float64 // the dynamic scaler's minimum; 0 without one
	hysteresis int
	skips      int // steps skipped in a row
	limit      int // the skips in a row that stop the run, set at the first of them
}

func newHealth(c *settings.Common) *health {
	h := &health{checkLoss: !c.NoCheckForNaN}
	if c.FP16 && c.LossScale == 0 {
		sc := c.ScalerConfig()
		h.minScale, h.hysteresis = sc.MinScale, sc.Hysteresis
	}
	return h
}

// check returns why training must stop after step, or nil.
func (h *health) check(step train.StepResult) error {
	if h.checkLoss && (math.IsNaN(step.Loss) || math.IsInf(step.Loss, 0)) {
		return fmt.Errorf("the training loss is %v: stopping before this iteration is saved "+
			"(--no-check-for-nan-in-loss-and-grad turns this check off)", step.Loss)
	}
	if !step.Skipped {
		h.skips = 0
		return nil
	}
	h.skips++
	if h.skips == 1 && h.minScale > 0 {
		h.limit = int(math.Round(math.Log2(math.Max(step.LossScale, h.minScale)/h.minScale))) + h.hysteresis + 1
	}
	if h.minScale > 0 && h.skips >= h.limit {
		return fmt.Errorf("fp16 loss scaling gave up: %d steps in a row were skipped for inf/NaN gradients, "+
			"the last one at --min-loss-scale %g", h.skips, h.minScale)
	}
	return nil
}
