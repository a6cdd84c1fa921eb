package optim

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"megago/internal/experttest"
	"megago/parallel"
	"megago/tensor"
)

const expertSteps = 3

// expertRun is what one rank reports: its parameters after training, by name, and the
// gradient norm of every step.
type expertRun struct {
	params map[string][]float32
	norms  []float64
	region map[string]tensor.Region
}

// trainExperts trains the toy model of package experttest for expertSteps steps on the
// goroutine ranks of l, each rank's gradients those its parameters would receive, with
// gradient clipping, and returns every rank's outcome.
func trainExperts(t *testing.T, l experttest.Layout, specs []experttest.Spec, distributed, overlap bool) []expertRun {
	t.Helper()
	out := make([]expertRun, l.World())
	err := parallel.RunLocal(l.World(), func(world parallel.Comm) error {
		ctx := context.Background()
		g, err := l.Groups(ctx, world)
		if err != nil {
			return err
		}
		dev := tensor.NewCPU()
		ps := experttest.BuildAll(dev, tensor.F32, specs, l, l.Coord(world.Rank()))
		groups := Groups{TP: g.TP, MP: g.MP, DP: g.DP, ExpertTP: g.ExpertTP, ExpertDP: g.ExpertDP, ExpertMP: g.ExpertMP}
		opt, err := New(ps, Config{LR: 0.05, WeightDecay: 0.1, ClipGrad: 2, Distributed: distributed, BucketSize: 100,
			Groups: groups, OverlapParamGather: overlap})
		if err != nil {
			return err
		}
		run := expertRun{params: map[string][]float32{}, region: map[string]tensor.Region{}}
		for step := range expertSteps {
			opt.ZeroGrad()
			experttest.SetGrads(ps, l, world.Rank(), step)
			res, err := opt.Step(ctx)
			if err != nil {
				return err
			}
			if res.GradNorm <= 2 {
				return fmt.Errorf("step %d: gradient norm %v: the test means to clip", step, res.GradNorm)
			}
			run.norms = append(run.norms, res.GradNorm)
			if !distributed { // the gradients are whole and reduced: GradNorm measures them alike
				if norm, err := GradNorm(ctx, ps, groups); err != nil || norm != res.GradNorm {
					return fmt.Errorf("step %d: GradNorm %v (%v), Step's %v", step, norm, err, res.GradNorm)
				}
			}
		}
		if err := opt.FinishParamGather(); err != nil {
			return err
		}
		for _, p := range ps {
			run.params[p.Name], run.region[p.Name] = tensor.ToSlice[float32](p.Tensor), p.Region()
		}
		out[world.Rank()] = run
		return nil
	})
	require.NoError(t, err)
	return out
}

// onOneStage returns specs with every parameter on stage 0.
func onOneStage(specs []experttest.Spec) []experttest.Spec {
	out := make([]experttest.Spec, len(specs))
	for i, s := range specs {
		s.Stage = 0
		out[i] = s
	}
	return out
}

// TestExpertParallelEqualsSingleRank: dense parameters averaged over DP and expert ones
// reduced over expert-DP (and scaled to an average over DP), with the gradient norm
// summed over MP and expert-MP, train as one rank holding everything does, bit for bit:
// the gradients are exact in any summation order (see experttest), so nothing may differ.
func TestExpertParallelEqualsSingleRank(t *testing.T) {
	for _, l := range []experttest.Layout{
		{TP: 1, PP: 1, DP: 4, ETP: 1, EP: 2},
		{TP: 1, PP: 2, DP: 4, ETP: 1, EP: 2},
		{TP: 2, PP: 1, DP: 2, ETP: 2, EP: 2},
		{TP: 2, PP: 1, DP: 2, ETP: 1, EP: 2},
	} {
		specs := experttest.Model(l.PP)
		ref := trainExperts(t, experttest.Layout{TP: 1, PP: 1, DP: 1, ETP: 1, EP: 1}, onOneStage(specs), false, false)[0]
		for _, o := range []struct{ distributed, overlap bool }{{false, false}, {true, false}, {true, true}} {
			t.Run(fmt.Sprintf("%v-distributed-%v-overlap-%v", l, o.distributed, o.overlap), func(t *testing.T) {
				for r, got := range trainExperts(t, l, specs, o.distributed, o.overlap) {
					require.Equal(t, ref.norms, got.norms, "rank %d gradient norms", r)
					for name, vals := range got.params {
						require.Equal(t, experttest.RegionOf(ref.params[name], got.region[name]), vals, "rank %d %s", r, name)
					}
				}
			})
		}
	}
}

// TestExpertBuffers: expert parameters get buffers of their own, after the dense ones,
// padded for the expert-DP size.
func TestExpertBuffers(t *testing.T) {
	l := experttest.Layout{TP: 1, PP: 1, DP: 1, ETP: 1, EP: 1}
	ps := experttest.BuildAll(tensor.NewCPU(), tensor.F32, experttest.Model(1), l, l.Coord(0))
	bufs := NewBuffers(ps, BufferConfig{DP: 2, ExpertDP: 256})
	require.Len(t, bufs, 2)
	require.False(t, bufs[0].Expert)
	require.True(t, bufs[1].Expert)
	names := func(b *Buffer) (out []string) {
		for _, e := range b.Entries {
			out = append(out, e.Param.Name)
		}
		return out
	}
	require.Equal(t, []string{"layers.0.dense.bias", "layers.0.dense.weight"}, names(bufs[0]))
	require.Equal(t, []string{"layers.0.mlp.experts.fc2.bias", "layers.0.mlp.experts.fc1.weight"}, names(bufs[1]))
	require.Equal(t, 0, bufs[1].Size()%256, "expert buffer padded for ExpertDP")
	require.Equal(t, 128, bufs[0].Size(), "dense buffer padded for DP")
}
