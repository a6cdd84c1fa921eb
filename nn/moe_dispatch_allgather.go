package nn

import (
	"megago/parallel"
	"megago/tensor"
)

// allGatherDispatch is Megatron's allgather token dispatcher (its default): the tokens,
// probabilities (in the tokens' dtype) and routing maps of the expert TP×EP group are
// all-gathered (GatherFromSP over rows; backward: reduce-scatter), each rank runs its
// local experts on the gathered tokens routed to them, weighs and sums their outputs per
// token, and the sums are reduce-scattered back to the ranks holding the tokens
// (ReduceScatterToSP; backward: all-gather), which adds up the experts of every EP rank
// and the partial products of every expert-TP rank.
func allGatherDispatch(m *MoE, p *Pass, x *tensor.Tensor, r Routing) *tensor.Tensor {
	g := m.groups.TPEP
	n, c := x.Dim(0), x.Dim(1)
	probs, mp := r.Probs.Cast(x.DType()), r.Map // [N, E], [N·E]
	if g.Size() > 1 {
		// Tokens and probabilities in one gather: one collective in backward, whatever
		// this rank's experts received.
		both := tensor.Concat(1, x, probs)                                                 // [N, C+E]
		both = parallel.GatherFromSP(p.Ctx, g, both.Reshape(1, n, c+m.experts)).Squeeze(0) // [G·N, C+E]
		parts := tensor.Split(both, 1, c, m.experts)
		x, probs = parts[0], parts[1] // [G·N, C], [G·N, E]
		mp = gatherMap(p, g, mp)
	}
	lo := m.groups.EP.Rank() * m.local
	pm := permute(mp, m.experts, lo, lo+m.local)
	y := m.Experts.Forward(p, pm.rows(x), pm.counts) // [M, C], partial over expert-TP
	y = pm.combine(y, probs, x.Dim(0))               // [G·N, C]
	if g.Size() > 1 {
		y = parallel.ReduceScatterToSP(p.Ctx, g, y.Reshape(1, -1, c)).Reshape(n, c) // [N, C]
	}
	return y
}

// gatherMap all-gathers the routing maps mp [N·E] of group g, in rank order: [G·N·E].
func gatherMap(p *Pass, g parallel.Comm, mp []bool) []bool {
	v := make([]int, len(mp))
	for i, b := range mp {
		if b {
			v[i] = 1
		}
	}
	out := make([]bool, 0, g.Size()*len(mp))
	for _, rank := range allGatherInts(p.Ctx, g, v) {
		for _, b := range rank {
			out = append(out, b != 0)
		}
	}
	return out
}
