package loop

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"

	"megago/optim"
	"megago/train"
)

// TestHealth: a loss that is not finite stops the run unless the check is off; skipped
// steps stop it only at the scaler's minimum after at least hysteresis skips in a row.
func TestHealth(t *testing.T) {
	const (
		lossStop  = "the training loss is NaN: stopping before this iteration is saved (--no-check-for-nan-in-loss-and-grad turns this check off)"
		infStop   = "the training loss is +Inf: stopping before this iteration is saved (--no-check-for-nan-in-loss-and-grad turns this check off)"
		scaleStop = "fp16 loss scaling gave up: 3 steps in a row were skipped for inf/NaN gradients, the last one at --min-loss-scale 1"
	)
	type step struct {
		loss, scale float64
		skipped     bool
	}
	tests := []struct {
		name  string
		h     health
		steps []step
		want  []string // each step's error, "" for none
	}{
		{"NaN loss", health{checkLoss: true}, []step{{1, 1, false}, {math.NaN(), 1, false}}, []string{"", lossStop}},
		{"infinite loss", health{checkLoss: true}, []step{{math.Inf(1), 1, false}}, []string{infStop}},
		{"NaN loss, check off", health{}, []step{{math.NaN(), 1, false}}, []string{""}},
		{"skips down to the minimum", health{minScale: 1, hysteresis: 2},
			// From 4 with hysteresis 2: log2(4/1) + 2 + 1 = 5 skips, the last two at the minimum.
			[]step{{1, 4, true}, {1, 4, true}, {1, 2, true}, {1, 1, true}, {1, 1, true}},
			[]string{"", "", "", "", "fp16 loss scaling gave up: 5 steps in a row were skipped for inf/NaN gradients, the last one at --min-loss-scale 1"}},
		{"a clean step resets the count", health{minScale: 1, hysteresis: 2},
			// A new run of skips at the minimum: log2(1/1) + 2 + 1 = 3 skips.
			[]step{{1, 1, true}, {1, 1, false}, {1, 1, true}, {1, 1, true}, {1, 1, true}}, []string{"", "", "", "", scaleStop}},
		{"constant loss scale never gives up", health{}, []step{{1, 1, true}, {1, 1, true}, {1, 1, true}}, []string{"", "", ""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := tt.h
			for i, s := range tt.steps {
				err := h.check(train.StepResult{Loss: s.loss, StepResult: optim.StepResult{LossScale: s.scale, Skipped: s.skipped}})
				if tt.want[i] == "" {
					assert.NoError(t, err, "step %d", i+1)
				} else {
					assert.EqualError(t, err, tt.want[i], "step %d", i+1)
				}
			}
		})
	}
}
