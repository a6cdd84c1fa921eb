package train

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"megago/nn"
	"megago/parallel"
	"megago/tensor"
)

// The mixture-of-experts matrix: a tiny GPT whose first and last layers are MoE blocks
// (4 experts, top-2, load-balancing loss and z-loss; a shared expert, SwiGLU, the
// sigmoid router with expert bias and the grouped GEMM in some cases) trained for
// moeSteps steps through the Trainer on goroutine ranks with expert parallelism, both
// dispatchers, with and without capacity dropping:
//
//	world 2: EP=2 (DP=2, expert-DP=1)
//	world 4: EP=4 (DP=4)
//	world 4: TP=2 with sequence parallelism, EP=2, expert-TP 1 (expert-DP=2) and 2
//	world 8: PP=2, DP=4, EP=2, expert-DP=2, distributed optimizer
//
// Each run reaches the single-rank run's step losses, per-step gradients (where
// recorded: not under the distributed optimizer), parameters and expert biases within
// matrixTol (see moeTol), and the two dispatchers agree bit for bit.
//
// Capacity is computed per rank over the tokens it routes (Megatron's behaviour), so a
// layout with dropping is compared only with a reference whose ranks route the same
// token sets:
//   - DP (and PP) leave a rank's micro-batch the single rank's: micro-batch i of DP rank
//     r holds the tinyBatch consecutive samples from (i·DP + r)·tinyBatch, which is
//     micro-batch i·DP + r of the single rank. These layouts are compared with one rank.
//   - Under sequence parallelism each TP rank routes its T/tp positions, so a TP=2 layout
//     with dropping is compared with the same TP=2, DP=2 layout without expert
//     parallelism (EP=1, same expert-TP), which routes identically; that layout without
//     dropping is compared with one rank too.
//
// In both cases the number of dropped (token, expert) pairs, counted from each
// micro-batch's tokens per expert and the capacity ⌈N·K/E·factor⌉, is asserted to be
// the reference's and not zero.

// moeSteps is the number of training steps of each run.
const moeSteps = 4

// moeTol: the runs differ from the reference only in float64 summation order (the DP
// average, TP all-reduces and expert-TP partial sums, and an expert's weight gradient
// summing the tokens of several ranks in one product where one rank sums them micro-batch
// by micro-batch); this is matrixTol's situation with fewer steps.
const moeTol = matrixTol

// moeModel is the mixture-of-experts configuration of the tiny MoE GPT and its activation.
type moeModel struct {
	nn.MoEConfig
	swiglu bool
}

func (m moeModel) String() string {
	s := "moe-" + map[bool]string{false: "gelu", true: "swiglu"}[m.swiglu]
	for _, f := range []struct {
		on   bool
		name string
	}{
		{m.Dispatcher == "alltoall", "alltoall"}, {m.CapacityFactor > 0, "drop"}, {m.SharedExpertFFNHidden > 0, "shared"},
		{m.SharedExpertGate, "gate"}, {m.EnableExpertBias, "bias"}, {m.GroupedGEMM, "grouped"},
	} {
		if f.on {
			s += "-" + f.name
		}
	}
	return s
}

// moeTinyLayers is the MoE GPT's depth: layers 0 and 3 are MoE blocks, so each stage of
// PP=2 has a dense and an MoE layer.
const moeTinyLayers = 4

// tinyMoE returns the moeModel of mc with 4 experts of hidden 8 in layers 0 and 3, top-2,
// aux loss and z-loss.
func tinyMoE(mc nn.MoEConfig, swiglu bool) moeModel {
	mc.NumExperts, mc.TopK, mc.FFNHidden, mc.LayerPattern = 4, 2, 8, "1,0,0,1"
	mc.AuxLossCoeff, mc.ZLossCoeff = 1e-2, 1e-3
	return moeModel{MoEConfig: mc, swiglu: swiglu}
}

// tinyMoEGPTConfig is the tiny GPT, untied, of moeTinyLayers layers with m's MoE blocks.
func tinyMoEGPTConfig(m moeModel) nn.GPTConfig {
	cfg := tinyGPTConfig(false)
	cfg.NumLayers = moeTinyLayers
	if m.swiglu {
		cfg.Activation = nn.SwiGLU
	}
	cfg.MoE = m.MoEConfig
	return cfg
}

// countDrops wraps fwd to add to *dropped the (token, expert) pairs each micro-batch's
// MoE blocks drop over capacity: an expert keeps at most ⌈N·K/E·factor⌉ of the tokens
// routed to it, N = B·T/tp the tokens a rank routes (its part of the sequence under TP).
// Without a capacity it returns fwd.
func countDrops(l layout, chunks []*nn.GPT, dropped *int, fwd parallel.ForwardFunc) parallel.ForwardFunc {
	if l.moe.CapacityFactor == 0 {
		return fwd
	}
	cfg := l.gptConfig().MoE
	n := tinyBatch * tinySeq / l.tp
	capacity := int(math.Ceil(float64(n*cfg.TopK) / float64(cfg.NumExperts) * cfg.CapacityFactor))
	return func(s parallel.Step) (*tensor.Tensor, error) {
		y, err := fwd(s)
		for _, st := range nn.MoEStats(chunks[s.Chunk]) {
			for _, k := range st.TokensPerExpert {
				*dropped += max(0, int(k)-capacity)
			}
		}
		return y, err
	}
}

// moeCase is one layout of the matrix and the model it trains (its dispatcher and
// capacity set per run).
type moeCase struct {
	l layout
	m moeModel
	// same, if set, is a layout with the same arithmetic (PP=1 for PP=2, the plain
	// optimizer for the distributed one), which must train to the same values bit for bit.
	same layout
}

func moeCases() []moeCase {
	shared := nn.MoEConfig{SharedExpertFFNHidden: 8, SharedExpertGate: true}
	bias := nn.MoEConfig{ScoreFunction: "sigmoid", EnableExpertBias: true}
	return []moeCase{
		{l: layout{tp: 1, pp: 1, dp: 2, ep: 2}, m: tinyMoE(shared, false)},
		{l: layout{tp: 1, pp: 1, dp: 4, ep: 4}, m: tinyMoE(nn.MoEConfig{GroupedGEMM: true}, true)},
		{l: layout{tp: 2, pp: 1, dp: 2, sp: true, ep: 2, etp: 1}, m: tinyMoE(bias, false)},
		{l: layout{tp: 2, pp: 1, dp: 2, sp: true, ep: 2, etp: 2}, m: tinyMoE(nn.MoEConfig{SharedExpertFFNHidden: 8}, true)},
		{l: layout{tp: 1, pp: 2, dp: 4, ep: 2, distributed: true}, m: tinyMoE(bias, true), same: layout{tp: 1, pp: 1, dp: 4, ep: 2}},
	}
}

// moeReference returns the layout a run of l is compared with: one rank, or with
// dropping under TP the same TP and DP without expert parallelism (see the top of the
// file). One EP rank moves no tokens between ranks: the reference keeps the default
// dispatcher.
func moeReference(l layout) layout {
	ref := layout{tp: 1, pp: 1, dp: 1, moe: l.moe}
	if l.moe.CapacityFactor > 0 && l.tp > 1 {
		ref = layout{tp: l.tp, pp: 1, dp: l.dp, sp: l.sp, etp: l.etp, moe: l.moe}
	}
	ref.moe.Dispatcher = ""
	return ref
}

func TestMoE3DMatrix(t *testing.T) {
	refs := map[layout]outcome{}
	for _, c := range moeCases() {
		for _, capacity := range []float64{0, 1} {
			var runs []outcome // per dispatcher
			for _, d := range []string{"allgather", "alltoall"} {
				l := c.l
				l.moe = c.m
				l.moe.Dispatcher, l.moe.CapacityFactor = d, capacity
				t.Run(l.String(), func(t *testing.T) {
					rl := moeReference(l)
					if _, ok := refs[rl]; !ok {
						refs[rl] = train3D(t, rl, moeSteps)
					}
					ref, got := refs[rl], train3D(t, l, moeSteps)
					runs = append(runs, got)
					checkMoERun(t, c.m, ref, got)
					t.Logf("largest parameter difference to %v: %.3g; %d pairs dropped", rl, maxDiff(ref, got), got.Dropped)
					if c.same.dp > 0 {
						same := c.same
						same.moe = l.moe
						compareExact(t, train3D(t, same, moeSteps), got)
					}
				})
			}
			// The dispatchers reorder no sum with one expert-TP rank; with two, the
			// experts' partial outputs are reduced over a different group.
			if len(runs) == 2 && c.l.expertTP() == 1 {
				l := c.l
				l.moe = c.m
				l.moe.CapacityFactor = capacity
				t.Run(l.String()+"-allgather=alltoall", func(t *testing.T) { compareExact(t, runs[0], runs[1]) })
			}
		}
	}
}

// checkMoERun compares a run of model m with its reference: losses, gradient norms,
// gradients and parameters within moeTol (compareTol), the same number of dropped
// pairs (not zero with a capacity), and with expert bias the same biases bit for bit
// (they move by multiples of the rate from integer token counts).
func checkMoERun(t *testing.T, m moeModel, ref, got outcome) {
	t.Helper()
	compareTol(t, ref, got)
	assert.InDeltaSlice(t, ref.Norm, got.Norm, moeTol, "gradient norms")
	assert.Equal(t, ref.Dropped, got.Dropped, "dropped (token, expert) pairs")
	if m.CapacityFactor > 0 {
		assert.Positive(t, got.Dropped, "tokens dropped")
	}
	if m.EnableExpertBias {
		require.Len(t, got.State, 2, "expert biases of layers 0 and 3")
		assert.Equal(t, ref.State, got.State, "expert biases")
		assert.NotEqual(t, make([]float64, 4), got.State["layers.0.mlp.router.expert_bias"], "the bias moved")
	}
}
