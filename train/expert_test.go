package train

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"megago/internal/experttest"
	"megago/nn"
	"megago/optim"
	"megago/parallel"
	"megago/tensor"
)

// toyParams are one rank's parameters after training, by name, with their regions.
type toyParams struct {
	values  map[string][]float32
	regions map[string]tensor.Region
}

// trainToyExperts trains package experttest's toy model with a Trainer for three steps
// on the goroutine ranks of l (PP = 1), with the distributed optimizer, each rank's loss
// the one whose gradients are its share (experttest.Loss), and returns every rank's
// parameters.
func trainToyExperts(t *testing.T, l experttest.Layout) []toyParams {
	t.Helper()
	out := make([]toyParams, l.World())
	err := parallel.RunLocal(l.World(), func(world parallel.Comm) error {
		ctx := context.Background()
		g, err := l.Groups(ctx, world)
		if err != nil {
			return err
		}
		mesh, err := parallel.NewMesh(ctx, world, parallel.Sizes{TP: l.TP, DP: l.DP})
		if err != nil {
			return err
		}
		dev, rank := tensor.NewCPU(), world.Rank()
		ps := experttest.BuildAll(dev, tensor.F32, experttest.Model(1), l, l.Coord(rank))
		groups := optim.Groups{TP: g.TP, MP: g.MP, DP: g.DP, ExpertTP: g.ExpertTP, ExpertDP: g.ExpertDP, ExpertMP: g.ExpertMP}
		tr, err := New(ctx, mesh, dev, nn.Parts{Chunks: [][]*nn.Param{ps}}, Config{Optim: optim.Config{LR: 0.05,
			WeightDecay: 0.1, ClipGrad: 2, Distributed: true, BucketSize: 100, Groups: groups}})
		if err != nil {
			return err
		}
		for step := range 3 {
			fwd := func(parallel.Step) (*tensor.Tensor, error) { return experttest.Loss(ps, l, rank, step), nil }
			if _, err := tr.Step(ctx, parallel.NoPipelining{M: 1}, fwd); err != nil {
				return err
			}
		}
		if err := tr.Optimizer().FinishParamGather(); err != nil {
			return err
		}
		r := toyParams{values: map[string][]float32{}, regions: map[string]tensor.Region{}}
		for _, p := range ps {
			r.values[p.Name], r.regions[p.Name] = tensor.ToSlice[float32](p.Tensor), p.Region()
		}
		out[rank] = r
		return nil
	})
	require.NoError(t, err)
	return out
}

// TestTrainerExpertParallel: the Trainer's gradient buckets reduce the expert ones over
// expert-DP (during backward, through the optimizer's ReduceBucket) and the result is the
// single rank's bit for bit, as in package optim's TestExpertParallelEqualsSingleRank
// (the gradients are exact, see experttest).
func TestTrainerExpertParallel(t *testing.T) {
	ref := trainToyExperts(t, experttest.Layout{TP: 1, PP: 1, DP: 1, ETP: 1, EP: 1})[0]
	for _, l := range []experttest.Layout{{TP: 1, PP: 1, DP: 4, ETP: 1, EP: 2}, {TP: 2, PP: 1, DP: 2, ETP: 1, EP: 2}} {
		t.Run(fmt.Sprint(l), func(t *testing.T) {
			for r, got := range trainToyExperts(t, l) {
				for name, vals := range got.values {
					require.Equal(t, experttest.RegionOf(ref.values[name], got.regions[name]), vals, "rank %d %s", r, name)
				}
			}
		})
	}
}
