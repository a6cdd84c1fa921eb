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

// The mixture-of-experts matrix: a tiny GPT (float64) whose layers 0 and 3 of 4 are MoE
// blocks (4 experts, top-2, load-balancing loss and z-loss; a shared expert, SwiGLU, the
// sigmoid router with expert bias, the grouped GEMM, drop by position with padding, the
// per-sequence aux loss in some cases) trained for moeSteps steps through the Trainer (losses scaled by
// Trainer.PassFor) on goroutine ranks, both dispatchers, with and without capacity
// dropping (capacity factor 1):
//
//	world 2: EP=2 (DP=2, expert-DP=1)
//	world 4: EP=4 (DP=4, expert-DP=1)
//	world 4: TP=2 with sequence parallelism (DP=2), EP=2, expert-TP 1 (expert-DP=2) and 2
//	world 8: PP=2, DP=4, EP=2, expert-DP=2, distributed optimizer
//
// Within matrixTol of the reference (below): the step losses, gradient norms, each
// step's reduced gradients (not recorded under the distributed optimizer, which keeps a
// shard of them) and the final parameters. The runs differ from the reference only in
// the order of float64 sums (the DP average, TP all-reduces, expert-TP partial sums, an
// expert's weight gradient summing several ranks' tokens in one product where one rank
// sums them micro-batch by micro-batch), as in the dense matrix; observed: below 1e-14.
//
// Bit for bit:
//   - the expert biases (moved by multiples of the rate from integer token counts,
//     all-reduced over TP×DP), and the number of dropped (token, expert) pairs, counted
//     from each micro-batch's tokens per expert and the capacity ⌈N·K/E·factor⌉, which
//     must not be zero with a capacity;
//   - the two dispatchers with one expert-TP rank (with top-2 each token's output adds
//     the same two expert outputs; with two expert-TP ranks allgather reduces the
//     partial outputs of all four ranks in rank order, alltoall per expert first);
//   - world 8 against world 4 with PP=1 and the plain optimizer (the same arithmetic).
//
// The reference. Capacity is computed per rank over the tokens it routes (Megatron's
// behaviour), so with dropping a reference must route the same token sets:
//   - DP and PP keep a micro-batch's tokens the single rank's: micro-batch i of DP rank r
//     holds the tinyBatch samples from (i·DP + r)·tinyBatch, micro-batch i·DP + r of
//     one rank. The TP=1 layouts, and every layout without dropping, are compared with
//     one rank.
//   - Under sequence parallelism each TP rank routes its T/tp positions: a TP=2 layout
//     with dropping is compared with the same TP=2, DP=2 layout without expert
//     parallelism (EP=1, same expert-TP), whose ranks route the same tokens.

// moeSteps is the number of training steps of each run.
const moeSteps = 4

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
		{m.DropPolicy == "position", "position"}, {m.PadToCapacity, "pad"}, {m.LoadBalancing == "seq_aux_loss", "seqaux"},
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
	// positionPad, with dropping, drops by position and pads to capacity.
	positionPad bool
}

func moeCases() []moeCase {
	shared := nn.MoEConfig{SharedExpertFFNHidden: 8, SharedExpertGate: true}
	bias := nn.MoEConfig{ScoreFunction: "sigmoid", EnableExpertBias: true}
	return []moeCase{
		{l: layout{tp: 1, pp: 1, dp: 2, ep: 2}, m: tinyMoE(shared, false)},
		{l: layout{tp: 1, pp: 1, dp: 4, ep: 4}, m: tinyMoE(nn.MoEConfig{GroupedGEMM: true}, true), positionPad: true},
		{l: layout{tp: 2, pp: 1, dp: 2, sp: true, ep: 2, etp: 1}, m: tinyMoE(bias, false)},
		{l: layout{tp: 2, pp: 1, dp: 2, sp: true, ep: 2, etp: 2}, m: tinyMoE(nn.MoEConfig{SharedExpertFFNHidden: 8, LoadBalancing: "seq_aux_loss"}, true)},
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

// run returns the layout of c's run with dispatcher d and capacity factor capacity.
func (c moeCase) run(d string, capacity float64) layout {
	l := c.l
	l.moe = c.m
	l.moe.Dispatcher, l.moe.CapacityFactor = d, capacity
	if capacity > 0 && c.positionPad {
		l.moe.DropPolicy, l.moe.PadToCapacity = "position", true
	}
	return l
}

func TestMoE3DMatrix(t *testing.T) {
	refs := map[layout]outcome{}
	for _, c := range moeCases() {
		for _, capacity := range []float64{0, 1} {
			runs := map[string]outcome{} // by dispatcher
			for _, d := range []string{"allgather", "alltoall"} {
				l := c.run(d, capacity)
				t.Run(l.String(), func(t *testing.T) {
					rl := moeReference(l)
					if _, ok := refs[rl]; !ok {
						refs[rl] = train3D(t, rl, moeSteps)
					}
					ref, got := refs[rl], train3D(t, l, moeSteps)
					runs[d] = got
					checkMoERun(t, l.moe.MoEConfig, ref, got)
					t.Logf("largest parameter difference to %v: %.3g; %d pairs dropped", rl, maxDiff(ref, got), got.Dropped)
					if c.same.dp > 0 {
						same := c.same
						same.moe = l.moe
						s := train3D(t, same, moeSteps)
						compareExact(t, s, got)
						checkMoERun(t, l.moe.MoEConfig, ref, s) // with its gradients, which the plain optimizer keeps
					}
				})
			}
			if c.l.expertTP() == 1 && len(runs) == 2 { // see the top of the file
				t.Run(c.run("", capacity).String()+"-allgather=alltoall", func(t *testing.T) {
					compareExact(t, runs["allgather"], runs["alltoall"])
				})
			}
		}
	}
}

// checkMoERun compares a run of MoE configuration m with its reference: losses, gradient norms,
// gradients and parameters within matrixTol (compareTol), the same number of dropped
// pairs (not zero with a capacity), and with expert bias the same biases bit for bit
// (they move by multiples of the rate from integer token counts).
func checkMoERun(t *testing.T, m nn.MoEConfig, ref, got outcome) {
	t.Helper()
	compareTol(t, ref, got)
	assert.InDeltaSlice(t, ref.Norm, got.Norm, matrixTol, "gradient norms")
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
