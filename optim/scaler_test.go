package optim

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"megago/nn"
	"megago/parallel"
	"megago/tensor"
)

func TestDynamicScalerRules(t *testing.T) {
	// Initial 16, min 1, ×2 / ×0.5, growth after 3 clean steps, hysteresis 2. Expected
	// values follow MEGATRON-FACTS' rules by hand.
	d, err := NewDynamicScaler(DynamicScalerConfig{InitialScale: 16, GrowthInterval: 3})
	require.NoError(t, err)
	type state struct {
		scale              float64
		growth, hysteresis int
	}
	for i, tc := range []struct {
		inf  bool
		want state
	}{
		{true, state{16, 0, 1}},  // first overflow only uses up hysteresis
		{true, state{8, 0, 0}},   // second: halve
		{true, state{4, 0, -1}},  // hysteresis is not reset: every overflow halves now
		{false, state{4, 1, -1}}, // clean steps count up ...
		{false, state{4, 2, -1}},
		{true, state{2, 0, -2}}, // ... and reset on overflow
		{false, state{2, 1, -2}},
		{false, state{2, 2, -2}},
		{false, state{4, 0, 2}}, // 3 clean steps: double, reset both counters
		{true, state{4, 0, 1}},  // hysteresis again
		{false, state{4, 1, 1}}, // a clean step does not restore hysteresis
		{true, state{2, 0, 0}},
		{true, state{1, 0, -1}},
		{true, state{1, 0, -2}}, // never below the minimum
		{false, state{1, 1, -2}},
		{false, state{1, 2, -2}},
		{false, state{2, 0, 2}},
		{false, state{2, 1, 2}},
		{false, state{2, 2, 2}},
		{false, state{4, 0, 2}},
		{true, state{4, 0, 1}},
		{false, state{4, 1, 1}},
		{false, state{4, 2, 1}},
		{false, state{8, 0, 2}},
		{true, state{8, 0, 1}},
		{true, state{4, 0, 0}},
		{false, state{4, 1, 0}},
		{true, state{2, 0, -1}},
		{false, state{2, 1, -1}},
		{false, state{2, 2, -1}},
		{false, state{4, 0, 2}},
		{false, state{4, 1, 2}},
		{false, state{4, 2, 2}},
		{false, state{8, 0, 2}},
		{false, state{8, 1, 2}},
		{false, state{8, 2, 2}},
		{false, state{16, 0, 2}},
		{false, state{16, 1, 2}},
		{false, state{16, 2, 2}},
		{false, state{32, 0, 2}},
		{true, state{32, 0, 1}},
		{true, state{16, 0, 0}},
		{false, state{16, 1, 0}},
	} {
		d.Update(tc.inf)
		require.Equal(t, tc.want, state{d.Scale(), d.GrowthTracker(), d.HysteresisTracker()}, "after update %d (inf=%v)", i+1, tc.inf)
	}

	// State round trip.
	r, err := NewDynamicScaler(DynamicScalerConfig{InitialScale: 16, GrowthInterval: 3})
	require.NoError(t, err)
	require.NoError(t, r.Load(d.StateDict()))
	require.Equal(t, *d, *r)
	require.ErrorContains(t, r.Load(&State{}), "grad_scaler.scale missing")
}

func TestDynamicScalerDefaults(t *testing.T) {
	d, err := NewDynamicScaler(DynamicScalerConfig{})
	require.NoError(t, err)
	require.Equal(t, math.Exp2(32), d.Scale())
	require.Equal(t, 2, d.HysteresisTracker())
	for range 999 {
		d.Update(false)
	}
	require.Equal(t, math.Exp2(32), d.Scale())
	d.Update(false)
	require.Equal(t, math.Exp2(33), d.Scale(), "doubles after 1000 clean steps")
	d.Update(true)
	d.Update(true)
	require.Equal(t, math.Exp2(32), d.Scale(), "halves on the second overflow")
	for range 40 {
		d.Update(true)
	}
	require.Equal(t, 1.0, d.Scale(), "floored at the minimum, 1")

	_, err = NewDynamicScaler(DynamicScalerConfig{BackoffFactor: 2})
	require.ErrorContains(t, err, "backoff < 1")
}

// scalerParams returns two small F32 parameters.
func scalerParams(dev *tensor.Device) []*nn.Param {
	return []*nn.Param{
		newTestParam(dev, tensor.F32, "w", []float64{0.5, -1, 2, 0.25}, 2, 2),
		newTestParam(dev, tensor.F32, "b", []float64{0.1, -0.2}, 2),
	}
}

// setGrads fills every gradient (made if missing) with scale·(1, 2, ...) and puts bad at element 0 of the
// first parameter when bad is not 0.
func setGrads(ps []*nn.Param, scale, bad float64) {
	k := 0.0
	for i, p := range ps {
		v := make([]float64, p.Numel())
		for j := range v {
			k++
			v[j] = scale * k
		}
		if i == 0 && bad != 0 {
			v[0] = bad
		}
		if p.Grad() == nil {
			p.SetGrad(tensor.ZerosLike(p.Tensor))
		}
		p.Grad().CopyFrom(tensor.FromSlice(p.Device(), v, p.Shape()...))
	}
}

func paramValues(ps []*nn.Param) [][]float64 {
	var out [][]float64
	for _, p := range ps {
		out = append(out, tensor.ToSlice[float64](p.Tensor))
	}
	return out
}

func TestScalerSkipsOverflowSteps(t *testing.T) {
	dev := tensor.NewCPU()
	ps := scalerParams(dev)
	sc, err := NewDynamicScaler(DynamicScalerConfig{InitialScale: 1024, GrowthInterval: 2})
	require.NoError(t, err)
	sched, err := NewSchedule(ScheduleConfig{MaxLR: 0.1, MinLR: 0.01, DecaySteps: 100, Decay: DecayCosine})
	require.NoError(t, err)
	opt, err := New(ps, Config{Schedule: sched, Scaler: sc})
	require.NoError(t, err)
	ctx := context.Background()
	for i, tc := range []struct {
		bad       float64
		wantScale float64 // the scale the step's gradients were divided by
		skip      bool
	}{
		{0, 1024, false},
		{math.Inf(1), 1024, true}, // hysteresis 2 → 1, scale kept
		{0, 1024, false},
		{0, 1024, false},           // second clean step: scale doubles after this step
		{math.NaN(), 2048, true},   // hysteresis reset to 2 by growth → 1
		{math.Inf(-1), 2048, true}, // → 0: halve
		{0, 1024, false},
	} {
		before, steps, schedSteps := paramValues(ps), opt.Steps(), sched.Steps()
		opt.ZeroGrad()
		setGrads(ps, tc.wantScale, tc.bad) // gradients of a loss scaled by the current scale
		res, err := opt.Step(ctx)
		require.NoError(t, err, "step %d", i)
		require.Equal(t, tc.skip, res.Skipped, "step %d", i)
		require.Equal(t, tc.wantScale, res.LossScale, "step %d", i)
		if tc.skip {
			require.Equal(t, before, paramValues(ps), "step %d: skipped step leaves parameters", i)
			require.Equal(t, steps, opt.Steps())
			require.Equal(t, schedSteps, sched.Steps(), "the schedule does not advance on a skipped step")
			continue
		}
		require.NotEqual(t, before, paramValues(ps), "step %d", i)
		require.InDelta(t, math.Sqrt(1+4+9+16+25+36), res.GradNorm, 1e-12, "norm of the unscaled gradients")
		require.Equal(t, steps+1, opt.Steps())
	}
}

// TestOverflowOnOneRankSkipsAll injects an inf into the gradients of one rank and checks
// that every rank skips the step: over DP with the distributed optimizer (the inf lands
// in one rank's shard after the reduce-scatter) and over the model-parallel group (whose
// ranks hold different parameters).
func TestOverflowOnOneRankSkipsAll(t *testing.T) {
	for _, tc := range []struct {
		name   string
		groups func(c parallel.Comm) Groups
		dist   bool
	}{
		{"dp2-distributed", func(c parallel.Comm) Groups { return Groups{DP: c} }, true},
		{"dp2", func(c parallel.Comm) Groups { return Groups{DP: c} }, false},
		{"mp2", func(c parallel.Comm) Groups { return Groups{MP: c} }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			skipped := make([][]bool, 2)
			err := parallel.RunLocal(2, func(c parallel.Comm) error {
				dev := tensor.NewCPU()
				ps := scalerParams(dev)
				sc, err := NewDynamicScaler(DynamicScalerConfig{InitialScale: 8})
				if err != nil {
					return err
				}
				opt, err := New(ps, Config{LR: 0.1, Scaler: sc, Distributed: tc.dist, Groups: tc.groups(c)})
				if err != nil {
					return err
				}
				for step := range 4 {
					before := paramValues(ps)
					opt.ZeroGrad()
					bad := 0.0
					if step == 2 && c.Rank() == 1 {
						// Element 0 of w lands in rank 1's shard after the reduce-scatter:
						// rank 0 learns of it only through the all-reduce.
						bad = math.Inf(1)
					}
					setGrads(ps, sc.Scale(), bad)
					res, err := opt.Step(context.Background())
					if err != nil {
						return err
					}
					skipped[c.Rank()] = append(skipped[c.Rank()], res.Skipped)
					if res.Skipped && !equalValues(before, paramValues(ps)) {
						t.Errorf("rank %d step %d: parameters changed on a skipped step", c.Rank(), step)
					}
				}
				return nil
			})
			require.NoError(t, err)
			want := []bool{false, false, true, false}
			require.Equal(t, [][]bool{want, want}, skipped)
		})
	}
}

func equalValues(a, b [][]float64) bool {
	for i := range a {
		for j := range a[i] {
			if a[i][j] != b[i][j] {
				return false
			}
		}
	}
	return true
}

func TestNonFiniteWithoutScaler(t *testing.T) {
	for _, bad := range []float64{math.NaN(), math.Inf(1)} {
		dev := tensor.NewCPU()
		ps := scalerParams(dev)
		opt, err := New(ps, Config{LR: 0.1, WeightDecay: 0.1})
		require.NoError(t, err)
		ctx := context.Background()
		setGrads(ps, 1, 0)
		_, err = opt.Step(ctx)
		require.NoError(t, err)
		before, state := paramValues(ps), stateValues(opt)

		opt.ZeroGrad()
		setGrads(ps, 1, bad)
		res, err := opt.Step(ctx)
		require.ErrorIs(t, err, ErrNonFinite)
		require.ErrorContains(t, err, "step 2 skipped, parameters unchanged")
		require.True(t, res.Skipped)
		require.Equal(t, before, paramValues(ps), "parameters untouched")
		require.Equal(t, state, stateValues(opt), "moments untouched")
		require.Equal(t, 1, opt.Steps())

		// Training goes on once the gradients are finite again.
		opt.ZeroGrad()
		setGrads(ps, 1, 0)
		_, err = opt.Step(ctx)
		require.NoError(t, err)
		require.Equal(t, 2, opt.Steps())
		for _, v := range paramValues(ps) {
			for _, x := range v {
				require.False(t, math.IsNaN(x) || math.IsInf(x, 0))
			}
		}
	}
}

func stateValues(o *Optimizer) [][]float64 {
	var out [][]float64
	for _, st := range o.StateDict().Tensors {
		out = append(out, tensor.ToSlice[float64](st.Tensor))
	}
	return out
}
