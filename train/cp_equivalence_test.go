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
	// CP = 2 × EP = 2 and CP = 2 × TP = 2 (sequence parallel) × EP = 2: the tiny MoE GPT
	// with the router's aux and z losses (counted over the TP × CP token group, their
	// gradients scaled by CP as the main loss's are) and seq_aux_loss.
	for _, mc := range []nn.MoEConfig{{}, {LoadBalancing: "seq_aux_loss"}} {
		moe := tinyMoE(mc, false)
		moeRef := train3D(t, layout{tp: 1, pp: 1, dp: 1, moe: moe}, cpSteps)
		for _, l := range []layout{
			{tp: 1, pp: 1, dp: 1, cp: 2, ep: 2, comm: "p2p", moe: moe},
			{tp: 2, pp: 1, dp: 1, cp: 2, ep: 2, sp: true, comm: "all_gather", moe: moe},
		} {
			t.Run(l.String()+"/"+mc.LoadBalancing, func(t *testing.T) { compareTol(t, moeRef, train3D(t, l, cpSteps)) })
		}
	}
}
