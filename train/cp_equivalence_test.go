package train

import (
	"testing"

	"megago/nn"
)

// cpSteps are enough AdamW steps for a wrong gradient combination over CP (averaged
// where it must be summed: half the gradient) to show in the parameters.
const cpSteps = 3

// TestGPTContextParallelEqualsSerial: the tiny GPT (dropout on, learned positions) trained
// with the Trainer at CP = 2 — each CP rank fed its CPPositions of the samples, the loss
// the mean over the whole sequences, gradients averaged over DP×CP — reaches the
// single-rank losses, gradients and parameters within matrixTol, for each comm type, and
// with TP = 2 and sequence parallelism, with PP = 2 × DP = 2 and full recomputation
// (the ring replayed in backward); and the tiny MoE GPT at CP = 2 × EP = 2.
func TestGPTContextParallelEqualsSerial(t *testing.T) {
	ref := train3D(t, layout{tp: 1, pp: 1, dp: 1}, cpSteps)
	for _, l := range []layout{
		{tp: 1, pp: 1, dp: 1, cp: 2, comm: "p2p"},
		{tp: 1, pp: 1, dp: 1, cp: 2, comm: "all_gather"},
		{tp: 2, pp: 1, dp: 1, cp: 2, comm: "p2p", sp: true},
		{tp: 1, pp: 2, dp: 2, cp: 2, comm: "p2p", rec: nn.RecomputeFull},
	} {
		t.Run(l.String(), func(t *testing.T) {
			got := train3D(t, l, cpSteps)
			compareTol(t, ref, got)
			t.Logf("largest parameter difference to CP=1: %.3g", maxDiff(ref, got))
		})
	}
	// CP = 2 × EP = 2: the tiny MoE GPT, without the router's auxiliary losses (computed
	// over each rank's tokens, they are not yet CP-aware: see nn's doc).
	moe := tinyMoE(nn.MoEConfig{}, false)
	moe.AuxLossCoeff, moe.ZLossCoeff = 0, 0
	moeRef := train3D(t, layout{tp: 1, pp: 1, dp: 1, moe: moe}, cpSteps)
	l := layout{tp: 1, pp: 1, dp: 1, cp: 2, ep: 2, comm: "p2p", moe: moe}
	t.Run(l.String(), func(t *testing.T) { compareTol(t, moeRef, train3D(t, l, cpSteps)) })
}
