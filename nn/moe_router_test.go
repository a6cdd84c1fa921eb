package nn

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"megago/parallel"
	"megago/tensor"

	"github.com/stretchr/testify/require"
)

// routerTestConfigs are router configurations covering every score function, load
// balancing type, the z-loss and capacity dropping.
var routerTestConfigs = []struct {
	name string
	moe  MoEConfig
}{
	{"softmax_aux_z", MoEConfig{AuxLossCoeff: 0.1, ZLossCoeff: 0.01}},
	{"pre_softmax_seq_aux", MoEConfig{PreSoftmax: true, LoadBalancing: "seq_aux_loss", AuxLossCoeff: 0.1}},
	{"sigmoid_bias_global_aux", MoEConfig{ScoreFunction: "sigmoid", EnableExpertBias: true, LoadBalancing: "global_aux_loss", AuxLossCoeff: 0.1}},
	{"sigmoid_top1_aux_z", MoEConfig{TopK: 1, ScoreFunction: "sigmoid", AuxLossCoeff: 0.2, ZLossCoeff: 0.01}},
	{"capacity_probs_pad", MoEConfig{AuxLossCoeff: 0.1, CapacityFactor: 0.5, PadToCapacity: true}},
	{"capacity_position", MoEConfig{ScoreFunction: "sigmoid", TopK: 3, LoadBalancing: "none", CapacityFactor: 0.75, DropPolicy: "position"}},
}

// TestRouterGradFiniteDifferences checks the router's hand-written backward (the
// probabilities and the attached losses) against central differences of
// Σ g·probs + scale·(losses) with respect to the logits, in float64.
func TestRouterGradFiniteDifferences(t *testing.T) {
	const b, seq, e, scale = 2, 4, 6, 0.7
	const eps, tol = 1e-6, 1e-6 // float64 central differences: error ~eps² and 1e-16/eps
	n := b * seq
	for _, tc := range routerTestConfigs {
		t.Run(tc.name, func(t *testing.T) {
			m := tc.moe
			m.NumExperts = e
			r := NewRouter(testBuilder(parallel.Self(), false), "router", TransformerConfig{Hidden: 4, MoE: m})
			if r.ExpertBias != nil {
				r.ExpertBias.CopyFrom(tensor.FromSlice(r.ExpertBias.Device(), toFloat32(scaled(seqValues(e, 1), 0.05)), e))
			}
			bias := biasOf(r)
			logits, g := scaled(seqValues(n*e, 2), 1.5), seqValues(n*e, 3)
			p := &Pass{Ctx: context.Background(), Train: true}
			objective := func(logits []float64) (float64, *routerChoice, *routerLoss) {
				c := chooseExperts(r.set, logits, bias, n)
				if m.CapacityFactor > 0 {
					c.dropOverCapacity(m.CapacityFactor, m.DropPolicy == "position", m.PadToCapacity, b, seq)
				}
				l := r.newRouterLoss(p, tensor.NewCPU(), logits, b, seq)
				v := scale * (l.aux + l.seqAux + l.globalAux + l.z)
				for i, pr := range c.finalProbs() {
					v += g[i] * pr
				}
				return v, c, l
			}
			_, c, l := objective(logits)
			grad := make([]float64, n*e)
			c.backward(g, grad)
			l.backward(logits, grad, scale)
			for i := range logits {
				x := logits[i]
				logits[i] = x + eps
				up, _, _ := objective(logits)
				logits[i] = x - eps
				down, _, _ := objective(logits)
				logits[i] = x
				if fd := (up - down) / (2 * eps); math.Abs(fd-grad[i]) > tol*(1+math.Abs(fd)) {
					t.Errorf("d/dlogits[%d, %d] = %.9g, finite differences %.9g", i/e, i%e, grad[i], fd)
				}
			}
		})
	}
}

// TestRouterSequenceParallel checks that two TP ranks under sequence parallelism, each
// routing half of every sequence, give the single-rank probabilities, input gradients,
// weight gradient (once the sequence-parallel gradients are summed), logged losses and
// expert bias update: the load-balancing counts are summed over TP as Megatron does.
func TestRouterSequenceParallel(t *testing.T) {
	const b, seq, c, e, tp = 2, 6, 8, 6, 2
	x, dy := seqValues(b*seq*c, 4), seqValues(b*seq*e, 5)
	for _, tc := range routerTestConfigs {
		if tc.moe.CapacityFactor > 0 {
			continue // capacity is per rank (Megatron's too): it differs from one rank's by design
		}
		t.Run(tc.name, func(t *testing.T) {
			cfg := TransformerConfig{Hidden: c, MoE: tc.moe}
			cfg.MoE.NumExperts = e
			ctx := context.Background()
			run := func(tpc parallel.Comm, part int) (rt Routing, r *Router, dx []float64, stats RouterStats, err error) {
				bld := testBuilder(tpc, tpc.Size() > 1)
				r = NewRouter(bld, "router", cfg)
				xt := tensor.FromSlice(bld.Dev, x, b, seq, c)
				dyt := tensor.FromSlice(bld.Dev, dy, b, seq, e)
				if tpc.Size() > 1 {
					xt, dyt = xt.Narrow(1, part*seq/tp, seq/tp).Contiguous(), dyt.Narrow(1, part*seq/tp, seq/tp).Contiguous()
				}
				xt.SetRequiresGrad(true)
				for m := range 2 { // two micro-batches: global_aux_loss accumulates over them
					p := &Pass{Ctx: ctx, Train: true, LossScale: 0.5, SampleOffset: m * b}
					rt = r.Route(p, xt)
					tensor.Sum(tensor.Mul(rt.Probs, dyt.Reshape(-1, e))).Backward()
				}
				if err = ReduceSequenceParallelGrads(ctx, tpc, r.Params()); err == nil {
					err = UpdateExpertBias(ctx, tpc, r)
				}
				return rt, r, tensor.ToSlice[float64](xt.Grad()), r.TakeStats(), err
			}
			want, wr, wdx, wstats, err := run(parallel.Self(), 0)
			require.NoError(t, err)
			wprobs := tensor.ToSlice[float64](want.Probs)
			err = parallel.RunLocal(tp, func(tpc parallel.Comm) error {
				got, r, dx, stats, err := run(tpc, tpc.Rank())
				if err != nil {
					return err
				}
				var bad []string
				check := func(what string, got, want []float64, atol float64) {
					if msg := closeMsg(got, want, 1e-5, atol); msg != "" {
						bad = append(bad, what+": "+msg)
					}
				}
				lo, hi := tpc.Rank()*seq/tp, (tpc.Rank()+1)*seq/tp // this rank's positions of each sequence
				check("probs", tensor.ToSlice[float64](got.Probs), seqRowsOf(wprobs, b, seq, e, lo, hi), 1e-6)
				check("dx", dx, seqRowsOf(wdx, b, seq, c, lo, hi), 1e-6)
				// the TP ranks' partial weight gradients are summed in another order
				check("dweight", tensor.ToSlice[float64](r.Weight.Grad()), tensor.ToSlice[float64](wr.Weight.Grad()), 1e-6)
				check("losses", []float64{stats.AuxLoss, stats.SeqAuxLoss, stats.GlobalAuxLoss, stats.ZLoss},
					[]float64{wstats.AuxLoss, wstats.SeqAuxLoss, wstats.GlobalAuxLoss, wstats.ZLoss}, 1e-7)
				if r.ExpertBias != nil {
					check("expert bias", tensor.ToSlice[float64](r.ExpertBias), tensor.ToSlice[float64](wr.ExpertBias), 0)
				}
				if len(bad) > 0 {
					return errors.New(strings.Join(bad, "; "))
				}
				return nil
			})
			require.NoError(t, err)
		})
	}
}

// TestRouterRecomputeCountsOnce checks that a micro-batch whose forward runs twice
// (full activation recomputation, replayed during its backward) is recorded once and
// routes the second time as the first, global_aux_loss included, so the gradients equal
// those without recomputation. The micro-batches run in 1F1B's warmup order (every
// forward before the first backward), where replaying the first micro-batch after the
// later ones' forwards must still see only its own counts.
func TestRouterRecomputeCountsOnce(t *testing.T) {
	const b, seq, c, e, micro = 2, 3, 4, 4, 3
	x := seqValues(micro*b*seq*c, 6)
	cfg := TransformerConfig{Hidden: c, MoE: MoEConfig{NumExperts: e, ScoreFunction: "sigmoid",
		EnableExpertBias: true, LoadBalancing: "global_aux_loss", AuxLossCoeff: 0.5}}
	grads := make([][]float64, 2)
	stats := make([]RouterStats, 2)
	for i, recompute := range []bool{false, true} {
		bld := testBuilder(parallel.Self(), false)
		r := NewRouter(bld, "router", cfg)
		var losses []*tensor.Tensor
		for m := range micro {
			p := &Pass{Ctx: context.Background(), Train: true, SampleOffset: m * b}
			xt := tensor.FromSlice(bld.Dev, x[m*b*seq*c:(m+1)*b*seq*c], b, seq, c).SetRequiresGrad(true)
			route := func(in []*tensor.Tensor) []*tensor.Tensor { return []*tensor.Tensor{r.Route(p, in[0]).Probs} }
			var probs *tensor.Tensor
			if recompute {
				probs = tensor.Checkpoint(route, xt)[0]
			} else {
				probs = route([]*tensor.Tensor{xt})[0]
			}
			losses = append(losses, tensor.Sum(tensor.Mul(probs, probs)))
		}
		for _, l := range losses {
			l.Backward()
		}
		grads[i] = tensor.ToSlice[float64](r.Weight.Grad())
		stats[i] = r.TakeStats()
		require.Equal(t, float64(micro*b*seq*2), sum(r.biasCounts), "expert-bias counts: micro-batches × N tokens × top-2")
	}
	require.Equal(t, grads[0], grads[1])
	require.Equal(t, stats[0], stats[1])
	require.Equal(t, micro, stats[1].Micro)
}

// TestUpdateExpertBias checks Megatron's update bias += rate·sign(mean − count) on counts
// summed over the group, here two ranks.
func TestUpdateExpertBias(t *testing.T) {
	cfg := TransformerConfig{Hidden: 2, MoE: MoEConfig{NumExperts: 4, ScoreFunction: "sigmoid", EnableExpertBias: true, BiasUpdateRate: 0.25}}
	// rank counts {1, 2, 3, 2} and {1, 0, 3, 2}: sum {2, 2, 6, 4}, mean 3.5
	want := []float64{0.25, 0.25, -0.25, -0.25}
	err := parallel.RunLocal(2, func(c parallel.Comm) error {
		r := NewRouter(testBuilder(parallel.Self(), false), "router", cfg)
		r.biasCounts = [][]float64{{1, 2, 3, 2}, {1, 0, 3, 2}}[c.Rank()]
		if err := UpdateExpertBias(context.Background(), c, r); err != nil {
			return err
		}
		if got := tensor.ToSlice[float64](r.ExpertBias); fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Errorf("bias %v, want %v", got, want)
		}
		if sum(r.biasCounts) != 0 {
			return fmt.Errorf("counts %v not reset", r.biasCounts)
		}
		return nil
	})
	require.NoError(t, err)
}

func TestMoEConfigValidate(t *testing.T) {
	base := TransformerConfig{NumLayers: 2, Hidden: 8, Heads: 2, Vocab: 16, MaxPosition: 8}
	for _, tc := range []struct {
		name string
		moe  MoEConfig
		want string // "" means valid
	}{
		{"defaults", MoEConfig{NumExperts: 4}, ""},
		{"full", MoEConfig{NumExperts: 4, TopK: 4, ScoreFunction: "sigmoid", EnableExpertBias: true, LoadBalancing: "seq_aux_loss",
			AuxLossCoeff: 1e-2, ZLossCoeff: 1e-3, CapacityFactor: 1.5, DropPolicy: "position", PadToCapacity: true, LayerPattern: "0,1"}, ""},
		{"negative experts", MoEConfig{NumExperts: -1}, "MoE.NumExperts"},
		{"topk above experts", MoEConfig{NumExperts: 2, TopK: 3}, "MoE.TopK = 3"},
		{"default topk above experts", MoEConfig{NumExperts: 1}, "MoE.TopK = 2"},
		{"score function", MoEConfig{NumExperts: 4, ScoreFunction: "softplus"}, "MoE.ScoreFunction"},
		{"load balancing", MoEConfig{NumExperts: 4, LoadBalancing: "sinkhorn"}, "MoE.LoadBalancing"},
		{"drop policy", MoEConfig{NumExperts: 4, DropPolicy: "random"}, "MoE.DropPolicy"},
		{"negative coefficient", MoEConfig{NumExperts: 4, AuxLossCoeff: -1}, "MoE.AuxLossCoeff"},
		{"NaN coefficient", MoEConfig{NumExperts: 4, ZLossCoeff: math.NaN()}, "MoE.ZLossCoeff"},
		{"pad without capacity", MoEConfig{NumExperts: 4, PadToCapacity: true}, "MoE.PadToCapacity"},
		{"bias with softmax", MoEConfig{NumExperts: 4, EnableExpertBias: true}, "MoE.EnableExpertBias"},
		{"pattern length", MoEConfig{NumExperts: 4, LayerPattern: "1,0,1"}, "MoE.LayerPattern"},
		{"pattern entry", MoEConfig{NumExperts: 4, LayerPattern: "1,2"}, "MoE.LayerPattern entry 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base
			cfg.MoE = tc.moe
			err := cfg.Validate()
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestIsMoELayer(t *testing.T) {
	for _, tc := range []struct {
		name string
		moe  MoEConfig
		want string // per layer of 4
	}{
		{"no experts", MoEConfig{}, "0000"},
		{"every layer", MoEConfig{NumExperts: 2}, "1111"},
		{"every second", MoEConfig{NumExperts: 2, LayerFreq: 2}, "1010"},
		{"every third", MoEConfig{NumExperts: 2, LayerFreq: 3}, "1001"},
		{"pattern", MoEConfig{NumExperts: 2, LayerPattern: "0, 1,1,0"}, "0110"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ""
			for i := range 4 {
				got += map[bool]string{false: "0", true: "1"}[tc.moe.IsMoELayer(i, 4)]
			}
			require.Equal(t, tc.want, got)
			require.False(t, tc.moe.IsMoELayer(4, 4))
		})
	}
}

// biasOf returns r's expert bias on the host, or nil.
func biasOf(r *Router) []float64 {
	if r.ExpertBias == nil {
		return nil
	}
	return tensor.ToSlice[float64](r.ExpertBias)
}

// seqRowsOf returns positions [lo, hi) of each of the b sequences of v [b, seq, w].
func seqRowsOf(v []float64, b, seq, w, lo, hi int) []float64 {
	var out []float64
	for i := range b {
		out = append(out, v[(i*seq+lo)*w:(i*seq+hi)*w]...)
	}
	return out
}

// closeMsg describes the elements where |got − want| > atol + rtol·|want|, or returns "".
func closeMsg(got, want []float64, rtol, atol float64) string {
	if len(got) != len(want) {
		return fmt.Sprintf("%d values, want %d", len(got), len(want))
	}
	for i := range got {
		if !(math.Abs(got[i]-want[i]) <= atol+rtol*math.Abs(want[i])) {
			return fmt.Sprintf("[%d] = %.9g, want %.9g", i, got[i], want[i])
		}
	}
	return ""
}

// scaled returns v times a.
func scaled(v []float64, a float64) []float64 {
	for i := range v {
		v[i] *= a
	}
	return v
}

// TestRouterEval checks that routing for inference (no Pass.Train, or no gradient
// recording) gives the training probabilities and map but attaches no loss and records
// nothing.
func TestRouterEval(t *testing.T) {
	const b, seq, c, e = 2, 3, 4, 4
	bld := testBuilder(parallel.Self(), false)
	cfg := TransformerConfig{Hidden: c, MoE: MoEConfig{NumExperts: e, AuxLossCoeff: 0.1, ZLossCoeff: 0.1}}
	r := NewRouter(bld, "router", cfg)
	x := tensor.FromSlice(bld.Dev, seqValues(b*seq*c, 7), b, seq, c)
	train := r.Route(&Pass{Ctx: context.Background(), Train: true}, x)
	for name, route := range map[string]func() Routing{
		"eval": func() Routing { return r.Route(Eval(context.Background()), x) },
		"no grad": func() (rt Routing) {
			bld.Dev.NoGrad(func() { rt = r.Route(&Pass{Ctx: context.Background(), Train: true}, x) })
			return
		},
	} {
		rt := route()
		require.Equal(t, train.Map, rt.Map, name)
		require.Equal(t, tensor.ToSlice[float64](train.Probs), tensor.ToSlice[float64](rt.Probs), name)
		tensor.Sum(rt.Probs).Backward()
	}
	require.Equal(t, RouterStats{TokensPerExpert: make([]int64, e)}, r.TakeStats(), "no backward of a training pass ran")
	// Only the eval pass's backward reached the weight: no auxiliary gradient.
	ref := NewRouter(bld, "router", cfg)
	tensor.Sum(ref.Route(Eval(context.Background()), x).Probs).Backward()
	require.Equal(t, tensor.ToSlice[float64](ref.Weight.Grad()), tensor.ToSlice[float64](r.Weight.Grad()))
}

// TestRouterGlobalAuxLossOverDP checks global_aux_loss over a data-parallel group
// (SetRouterGlobalGroup): two ranks each routing one of two sequences give, summed over
// the ranks, the weight gradient and the logged loss of one rank routing both.
func TestRouterGlobalAuxLossOverDP(t *testing.T) {
	const b, seq, c, e, dp = 2, 3, 4, 4, 2
	x := seqValues(2*b*seq*c, 8) // two micro-batches
	cfg := TransformerConfig{Hidden: c, MoE: MoEConfig{NumExperts: e, LoadBalancing: "global_aux_loss", AuxLossCoeff: 0.3}}
	ctx := context.Background()
	run := func(g parallel.Comm) ([]float64, RouterStats, error) {
		bld := testBuilder(parallel.Self(), false)
		r := NewRouter(bld, "router", cfg)
		SetRouterGlobalGroup(g, r)
		rows := b / g.Size() // sequences per rank
		for m := range 2 {
			xm := x[(m*b+g.Rank()*rows)*seq*c : (m*b+(g.Rank()+1)*rows)*seq*c]
			p := &Pass{Ctx: ctx, Train: true, SampleOffset: m * b}
			rt := r.Route(p, tensor.FromSlice(bld.Dev, xm, rows, seq, c))
			tensor.Sum(tensor.Mul(rt.Probs, rt.Probs)).Backward()
		}
		grad := r.Weight.Grad()
		err := g.AllReduce(ctx, grad, parallel.Sum) // what DP's gradient reduction sums
		return tensor.ToSlice[float64](grad), r.TakeStats(), err
	}
	wgrad, wstats, err := run(parallel.Self())
	require.NoError(t, err)
	require.NotZero(t, wstats.GlobalAuxLoss)
	err = parallel.RunLocal(dp, func(g parallel.Comm) error {
		grad, stats, err := run(g)
		if err != nil {
			return err
		}
		// the ranks' partial gradients and sums of scores are added in another order
		if msg := closeMsg(append(grad, stats.GlobalAuxLoss), append(wgrad, wstats.GlobalAuxLoss), 1e-6, 1e-9); msg != "" {
			return errors.New(msg)
		}
		return nil
	})
	require.NoError(t, err)
}
