package checkpoint

import (
	"context"
	"math"
	"slices"
	"sync"
	"testing"

	"megago/tensor"
)

// Resuming is exact: 20 iterations straight equal 10 iterations, a save, a load into
// fresh objects (a new "process"), and 10 more — the same losses, gradient norms,
// learning rates and loss scales, and the same final parameters bit for bit, with
// dropout on, the distributed optimizer, BF16 parameters with FP32 master weights, a
// dynamic loss scaler and a learning-rate schedule.
func TestResumeIsExact(t *testing.T) {
	for _, l := range []layout{
		{tp: 2, pp: 2, dp: 2, distributed: true, dtype: tensor.BF16, tied: true},
		{tp: 1, pp: 1, dp: 2, distributed: true, dtype: tensor.F32},
		{tp: 1, pp: 2, dp: 2, distributed: true, dtype: tensor.F32, ep: 2}, // MoE: experts and their biases
	} {
		t.Run(l.String(), func(t *testing.T) {
			const total, half = 20, 10
			type record struct{ Loss, Norm, LR, Scale float64 }
			straight, resumed := make([]record, total), make([]record, total)
			rec := func(into []record, it int, r *rig, ctx context.Context) error {
				res, err := r.step(ctx, it)
				if r.mesh.Rank() == 0 { // every rank has the same
					into[it] = record{res.Loss, res.GradNorm, res.LR, res.LossScale}
				}
				return err
			}
			var mu sync.Mutex
			want, got := map[string][]float64{}, map[string][]float64{}
			runLayout(t, l, func(ctx context.Context, r *rig) error {
				for it := range total {
					if err := rec(straight, it, r, ctx); err != nil {
						return err
					}
				}
				r.params(want, &mu)
				return nil
			})
			dir := t.TempDir()
			runLayout(t, l, func(ctx context.Context, r *rig) error {
				for it := range half {
					if err := rec(resumed, it, r, ctx); err != nil {
						return err
					}
				}
				return Save(ctx, dir, r.mesh, r.st)
			})
			runLayout(t, l, func(ctx context.Context, r *rig) error {
				m, err := Load(ctx, dir, r.mesh, r.st, LoadOptions{})
				if err != nil {
					return err
				}
				if m.Iteration != half || r.st.Iteration != half || r.st.ConsumedSamples != half*hGlobal {
					t.Errorf("loaded iteration %d, state %d, consumed %d", m.Iteration, r.st.Iteration, r.st.ConsumedSamples)
				}
				for it := r.st.Iteration; it < total; it++ {
					if err := rec(resumed, it, r, ctx); err != nil {
						return err
					}
				}
				r.params(got, &mu)
				return nil
			})
			if !slices.Equal(straight, resumed) {
				t.Errorf("resumed run differs:\nstraight %v\nresumed  %v", straight, resumed)
			}
			if straight[total-1].Scale <= straight[0].Scale {
				t.Errorf("the loss scale never grew (%v → %v): the scaler's state is not exercised", straight[0].Scale, straight[total-1].Scale)
			}
			for name, w := range want {
				if g := got[name]; !slices.EqualFunc(w, g, func(a, b float64) bool { return math.Float64bits(a) == math.Float64bits(b) }) {
					t.Errorf("%s differs after resuming (max rel diff %g)", name, maxRelDiff(g, w))
				}
			}
			if len(want) == 0 || len(got) != len(want) {
				t.Errorf("compared %d parameters of %d", len(got), len(want))
			}
		})
	}
}
