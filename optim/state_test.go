package optim

import (
	"context"
	"maps"
	"testing"

	"github.com/stretchr/testify/require"

	"megago/nn"
	"megago/parallel"
	"megago/tensor"
)

// stateParams returns BF16 parameters w [10, 13] and b [13]. Laid out as b at 0 and w at
// 64..194 in a bucket of 256, a DP=2 shard boundary at 128 splits w.
func stateParams(dev *tensor.Device, vals [][]float64) []*nn.Param {
	if vals == nil {
		vals = [][]float64{kernelData(130, 1), kernelData(13, 2)}
	}
	return []*nn.Param{
		newTestParam(dev, tensor.BF16, "w", vals[0], 10, 13),
		newTestParam(dev, tensor.BF16, "b", vals[1], 13),
	}
}

// stateOptimizer returns a distributed AdamW over DP group c with a dynamic loss scaler
// and a schedule, so that its state has tensors and scalars of every kind.
func stateOptimizer(ps []*nn.Param, c parallel.Comm) (*Optimizer, error) {
	sc, err := NewDynamicScaler(DynamicScalerConfig{InitialScale: 4, GrowthInterval: 2})
	if err != nil {
		return nil, err
	}
	sched, err := NewSchedule(ScheduleConfig{MaxLR: 0.05, MinLR: 0.01, WarmupSteps: 2, DecaySteps: 10, StartWD: 0.1, EndWD: 0.1})
	if err != nil {
		return nil, err
	}
	return New(ps, Config{Scaler: sc, Schedule: sched, Distributed: true, Groups: Groups{DP: c}})
}

// snapshot deep-copies a state, so later steps do not change it.
func snapshot(st *State) *State {
	out := &State{Scalars: maps.Clone(st.Scalars)}
	for _, t := range st.Tensors {
		t.Tensor = t.Tensor.Clone()
		out.Tensors = append(out.Tensors, t)
	}
	return out
}

// TestStateRoundTrip saves the distributed optimizer's state on each of two DP ranks,
// loads it into a new optimizer on parameters with the same values, and checks that the
// next steps are identical.
func TestStateRoundTrip(t *testing.T) {
	ranges := make([]map[string][2]int, 2)
	err := parallel.RunLocal(2, func(c parallel.Comm) error {
		ctx := context.Background()
		dev := tensor.NewCPU()
		a := stateParams(dev, nil)
		optA, err := stateOptimizer(a, c)
		if err != nil {
			return err
		}
		for range 3 {
			optA.ZeroGrad()
			setGrads(a, optA.cfg.Scaler.Scale()*0.1, 0)
			if _, err := optA.Step(ctx); err != nil {
				return err
			}
		}
		saved := snapshot(optA.StateDict())
		ranges[c.Rank()] = map[string][2]int{}
		for _, st := range saved.Tensors {
			ranges[c.Rank()][st.Name] = st.Flat
			want := a[0].Region()
			if st.Name[len(st.Name)-1] == 'b' {
				want = a[1].Region()
			}
			if !sameRegion(want, st.Region) {
				t.Errorf("rank %d %s: region %+v", c.Rank(), st.Name, st.Region)
			}
		}

		b := stateParams(dev, paramValues(a))
		optB, err := stateOptimizer(b, c)
		if err != nil {
			return err
		}
		missing := &State{Scalars: saved.Scalars, Tensors: saved.Tensors[1:]}
		if err := optB.Load(missing); err == nil {
			t.Errorf("rank %d: loading a state without %s succeeded", c.Rank(), saved.Tensors[0].Name)
		}
		if err := optB.Load(saved); err != nil {
			return err
		}
		for step := range 3 {
			for _, o := range []*Optimizer{optA, optB} {
				o.ZeroGrad()
			}
			setGrads(a, optA.cfg.Scaler.Scale()*0.2, 0)
			setGrads(b, optB.cfg.Scaler.Scale()*0.2, 0)
			ra, err := optA.Step(ctx)
			if err != nil {
				return err
			}
			rb, err := optB.Step(ctx)
			if err != nil {
				return err
			}
			if ra != rb || !equalValues(paramValues(a), paramValues(b)) {
				t.Errorf("rank %d step %d after loading: %+v vs %+v", c.Rank(), step, ra, rb)
			}
		}
		return nil
	})
	require.NoError(t, err)
	// Rank 0 holds b and the first 64 elements of w, rank 1 the rest of w: Megatron's
	// flattened ranges, each element of each state on exactly one rank.
	for _, kind := range []string{"exp_avg", "exp_avg_sq", "fp32_param"} {
		require.Equal(t, [2]int{0, 13}, ranges[0]["optimizer.state."+kind+".b"])
		require.Equal(t, [2]int{0, 64}, ranges[0]["optimizer.state."+kind+".w"])
		require.Equal(t, [2]int{64, 130}, ranges[1]["optimizer.state."+kind+".w"])
		require.NotContains(t, ranges[1], "optimizer.state."+kind+".b")
	}
}

func TestLoadRejectsOtherLayout(t *testing.T) {
	dev := tensor.NewCPU()
	ps := stateParams(dev, nil)
	opt, err := New(ps, Config{LR: 0.1})
	require.NoError(t, err)
	st := snapshot(opt.StateDict())
	st.Tensors[0].Flat = [2]int{0, 64}
	require.ErrorContains(t, opt.Load(st), "exp_avg.b holds [13] of [13] [0, 64), want [13] of [13] [0, 13)")
	require.ErrorContains(t, opt.Load(&State{Tensors: snapshot(opt.StateDict()).Tensors}), "optimizer.step missing")
}
