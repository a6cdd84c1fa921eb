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

// clipRank is what one TP rank reports: the norms it computed and its parameters after
// one clipped AdamW step.
type clipRank struct {
	norm, naive, stepNorm float64
	params                map[string]*nn.Param
}

func runClip(t *testing.T, tp int) []clipRank {
	t.Helper()
	cfg := tinyGPT(2, 16, 64, 8)
	out := make([]clipRank, tp)
	err := parallel.RunLocal(tp, func(c parallel.Comm) error {
		m, dev, err := newGPT(cfg, tensor.F64, c)
		if err != nil {
			return err
		}
		g := Groups{TP: c, MP: c}
		// ClipGrad far below the norm, so the clipping coefficient is in play.
		opt, err := New(m.Params(), Config{LR: 0.01, WeightDecay: 0.1, ClipGrad: 0.05, Groups: g})
		if err != nil {
			return err
		}
		ids, labels := batch(dev, 0, 0, 2, 8, 64)
		forwardBackward(m, opt, ids, labels, 1)
		ctx := context.Background()
		r := clipRank{params: map[string]*nn.Param{}}
		if r.norm, err = GradNorm(ctx, m.Params(), g); err != nil {
			return err
		}
		// Counting replicated parameters on every TP rank (every rank thinks it is TP
		// rank 0) gives a different, wrong, norm at TP > 1.
		if r.naive, err = GradNorm(ctx, m.Params(), Groups{MP: c}); err != nil {
			return err
		}
		res, err := opt.Step(ctx)
		if err != nil {
			return err
		}
		r.stepNorm = res.GradNorm
		for _, p := range m.Params() {
			r.params[p.Name] = p
		}
		out[c.Rank()] = r
		return nil
	})
	require.NoError(t, err)
	return out
}

func TestClipTensorParallelEqualsSerial(t *testing.T) {
	ref := runClip(t, 1)[0]
	require.Greater(t, ref.norm, 1.0, "gradients large enough to clip")
	require.InDelta(t, ref.norm, ref.stepNorm, 1e-12*ref.norm, "Step computes the same norm as GradNorm")
	for r, got := range runClip(t, 2) {
		// The TP all-reduces and split matmuls reorder float64 sums.
		require.InDelta(t, ref.norm, got.norm, 1e-12*ref.norm, "rank %d GradNorm", r)
		require.InDelta(t, ref.norm, got.stepNorm, 1e-12*ref.norm, "rank %d Step norm", r)
		require.Greater(t, math.Abs(got.naive-ref.norm), 1e-6, "rank %d: the TP-replicated rule matters", r)
		for name, p := range got.params {
			require.InDeltaSlice(t, shardOfGlobal(ref.params[name], p), tensor.ToSlice[float64](p.Tensor), 1e-12, "rank %d %s after the clipped step", r, name)
		}
	}
}

func TestClipGradNorm(t *testing.T) {
	dev := tensor.NewCPU()
	ps := scalerParams(dev) // gradients 1..6: norm √91
	setGrads(ps, 1, 0)
	ps[1].Shared = true // skipped: norm of 1..4 = √30
	ctx := context.Background()
	norm, err := ClipGradNorm(ctx, ps, 1, Groups{})
	require.NoError(t, err)
	require.InDelta(t, math.Sqrt(30), norm, 1e-12)
	coeff := 1 / (math.Sqrt(30) + clipEps)
	require.InDeltaSlice(t, []float64{coeff, 2 * coeff, 3 * coeff, 4 * coeff}, tensor.ToSlice[float64](ps[0].Grad()), 1e-7)

	// A norm under the limit leaves the gradients alone; so does a non-finite one.
	setGrads(ps, 1, 0)
	_, err = ClipGradNorm(ctx, ps, 100, Groups{})
	require.NoError(t, err)
	require.Equal(t, []float64{1, 2, 3, 4}, tensor.ToSlice[float64](ps[0].Grad()))
	setGrads(ps, 1, math.Inf(1))
	norm, err = ClipGradNorm(ctx, ps, 1, Groups{})
	require.NoError(t, err)
	require.True(t, math.IsInf(norm, 1))
	require.Equal(t, []float64{2, 3, 4}, tensor.ToSlice[float64](ps[0].Grad())[1:])
}
