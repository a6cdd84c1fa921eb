package optim

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"megago/parallel"
	"megago/tensor"
)

func TestConfigValidate(t *testing.T) {
	sched, err := NewSchedule(ScheduleConfig{MaxLR: 0.1, Decay: DecayConstant})
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		cfg  Config
		want string // "" when valid
	}{
		{"adamw-defaults", Config{LR: 1e-3}, ""},
		{"schedule-instead-of-lr", Config{Schedule: sched}, ""},
		{"no-lr", Config{}, "need LR > 0 or a Schedule"},
		{"negative-wd", Config{LR: 1, WeightDecay: -1}, "negative weight decay"},
		{"negative-clip", Config{LR: 1, ClipGrad: -1}, "clip-grad norm -1"},
		{"beta-one", Config{LR: 1, Rule: Adam{Beta1: 1}}, "betas (1, 0.999)"},
		{"nesterov-without-momentum", Config{LR: 1, Rule: SGD{Nesterov: true}}, "Nesterov"},
		{"dampening-above-one", Config{LR: 1, Rule: SGD{Momentum: 0.9, Dampening: 2}}, "dampening 2"},
		{"zero-constant-scale", Config{LR: 1, Scaler: ConstantScaler{}}, "loss scale 0"},
		{"negative-bucket", Config{LR: 1, BucketSize: -1}, "bucket size"},
		{"overlap-gather-without-distributed", Config{LR: 1, OverlapParamGather: true}, "OverlapParamGather needs Distributed"},
		{"skip-norm", Config{LR: 1, SkipGradNorm: true}, ""},
		{"skip-norm-with-clip", Config{LR: 1, SkipGradNorm: true, ClipGrad: 1}, "SkipGradNorm with clipping"},
		{"skip-norm-with-scaler", Config{LR: 1, SkipGradNorm: true, Scaler: ConstantScaler{Value: 8}}, "SkipGradNorm with clipping or a loss scaler"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.want)
			_, err = New(scalerParams(tensor.NewCPU()), tc.cfg)
			require.ErrorContains(t, err, tc.want, "New validates")
		})
	}
}

// TestReduceBucketOnce reduces the buckets before Step, as a data-parallel wrapper does
// during backward, and checks that Step does not reduce them again: with the distributed
// optimizer a second reduce-scatter would average partial data.
func TestReduceBucketOnce(t *testing.T) {
	final := make([][][]float64, 2)
	err := parallel.RunLocal(2, func(c parallel.Comm) error {
		var runs [][]float64
		for _, early := range []bool{false, true} {
			ps := stateParams(tensor.NewCPU(), nil)
			opt, err := New(ps, Config{LR: 0.01, Distributed: true, Groups: Groups{DP: c}, BucketSize: 10})
			if err != nil {
				return err
			}
			for step := range 3 {
				opt.ZeroGrad()
				setGrads(ps, float64(1+c.Rank()+step), 0) // different gradients per rank
				if early {
					for i, b := range opt.Buffers() {
						for k := len(b.Buckets) - 1; k >= 0; k-- { // in any order
							if err := opt.ReduceBucket(context.Background(), i, k); err != nil {
								return err
							}
						}
					}
				}
				if _, err := opt.Step(context.Background()); err != nil {
					return err
				}
			}
			runs = append(runs, paramValues(ps)...)
		}
		final[c.Rank()] = runs
		return nil
	})
	require.NoError(t, err)
	for r, runs := range final {
		require.Equal(t, runs[:2], runs[2:], "rank %d: reducing early changes nothing", r)
	}
	require.Equal(t, final[0], final[1])
}

func TestNewKeepsRequiresGrad(t *testing.T) {
	dev := tensor.NewCPU()
	ps := scalerParams(dev)
	ps[1].SetRequiresGrad(false)
	_, err := New(ps, Config{LR: 1})
	require.NoError(t, err)
	require.True(t, ps[0].RequiresGrad())
	require.False(t, ps[1].RequiresGrad())
}

func TestAccumulateAfterReducePanics(t *testing.T) {
	ps := stateParams(tensor.NewCPU(), nil)
	opt, err := New(ps, Config{LR: 1})
	require.NoError(t, err)
	opt.AccumulateGrads()
	require.NoError(t, opt.ReduceGrads(context.Background()))
	require.PanicsWithValue(t, "optim: AccumulateGrads: bucket 0 of the bfloat16 buffer was reduced since ZeroGrad", opt.AccumulateGrads)
	opt.ZeroGrad()
	opt.AccumulateGrads()
}
