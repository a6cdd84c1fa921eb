package optim_test

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"megago/nn"
	"megago/optim"
	"megago/tensor"
)

// TestScheduleIncrement: with SetScheduleIncrement(n) a successful step advances the
// schedule by n (Megatron's sample-counting schedule advances by the global batch), a
// step skipped for an infinite gradient by nothing.
func TestScheduleIncrement(t *testing.T) {
	dev := tensor.NewCPU()
	w := &nn.Param{Tensor: tensor.Zeros(dev, tensor.F32, 3).SetRequiresGrad(true), Name: "w",
		GlobalShape: tensor.Shape{3}, PartitionDim: -1, TPReplicated: true}
	sched, err := optim.NewSchedule(optim.ScheduleConfig{MaxLR: 0.1, MinLR: 0.01, WarmupSteps: 10, DecaySteps: 100, Decay: optim.DecayLinear})
	require.NoError(t, err)
	opt, err := optim.New([]*nn.Param{w}, optim.Config{Schedule: sched, Scaler: optim.ConstantScaler{Value: 1}})
	require.NoError(t, err)
	step := func(grad float64) optim.StepResult {
		t.Helper()
		opt.ZeroGrad()
		tensor.Sum(tensor.Scale(w.Tensor, grad)).Backward()
		res, err := opt.Step(context.Background())
		require.NoError(t, err)
		return res
	}
	step(1)
	assert.Equal(t, 1, sched.Steps(), "the default counts steps")
	opt.SetScheduleIncrement(4)
	res := step(1)
	assert.InDelta(t, 0.01, res.LR, 1e-12, "the rate of step 1 of the warmup: 0.1·1/10")
	assert.Equal(t, 5, sched.Steps())
	res = step(math.Inf(1))
	assert.True(t, res.Skipped)
	assert.Equal(t, 5, sched.Steps(), "a skipped step advances nothing")
	assert.Panics(t, func() { opt.SetScheduleIncrement(0) })
}
