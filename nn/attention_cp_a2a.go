package nn

import (
	"context"
	"fmt"
	"slices"

	"megago/parallel"
	"megago/tensor"
)

// Context-parallel attention by all-to-all: CPCommType "a2a" (DeepSpeed Ulysses,
// Megatron's --cp-comm-type a2a) and "a2a+p2p" (with CPHierarchy, Megatron's
// --hierarchical-context-parallel-sizes). Under "a2a" a rank trades sequence for heads:
// an all-to-all over the CP group (parallel.AllToAllCPSeqToHeads) turns its q, k, v
// [B, NH/tp, T/cp, HS] — all heads at its CPPositions — into [B, NH/(tp·cp), T, HS] — its
// cp-th of the heads at every position, in sequence order — so one plain (causal)
// tensor.Attention over the whole sequence computes those heads exactly, and the inverse
// all-to-all (AllToAllCPHeadsToSeq) returns the output to the rank's positions. Nothing
// is combined by log-sum-exp; the cost is two all-to-alls of q, k, v and one of the
// output per layer (the gradients retrace them in backward), each moving (cp−1)/cp of
// the tensor, and the heads per TP rank must divide by cp. With grouped-query attention
// the key/value groups per TP rank G/tp must divide by cp too; when they do not (G/tp <
// cp, as with multi-query attention) each group is replicated cp/gcd(G/tp, cp) times
// before the exchange and the replicas' gradients are summed back: the values of
// attention with each group repeated for its query heads. (Transformer Engine's a2a
// instead requires the key/value heads to divide by cp.) Under "a2a+p2p" the CP group of a·o ranks is split as Megatron does:
// consecutive ranks r with the same r/a form an a2a group of a, ranks with the same r mod
// a a p2p group of o. The all-to-all runs over the a2a group only, after which a rank
// holds its a-th of the heads at the positions of its whole a2a group — which are p2p
// rank j's load-balanced chunks j and 2o−1−j of the sequence cut in 2·o — and the keys
// and values of the other p2p ranks are then all-gathered over the p2p group
// (parallel.GatherFromCP; backward: reduce-scatter), which gives the values Megatron's
// p2p ring gives without overlapping transfers with compute. Dropout masks are drawn at
// global coordinates (sample, head of NH, query and key position), so every comm type
// and CP size draws CP=1's masks.

// cpA2A is the "a2a" context-parallel core (a cpAttention): q [B, NH/tp, T/cp, HS] and
// k, v [B, G/tp, T/cp, HS] at the rank's CPPositions become out [B, T/cp, NH·HS/tp]. It
// panics if NH/tp is not divisible by cp, or o.Positions are not cp's CPPositions.
func cpA2A(p *Pass, cp parallel.Comm, q, k, v *tensor.Tensor, o cpAttnOptions) *tensor.Tensor {
	return a2aAttend(p, cp, nil, q, k, v, o)
}

// cpHierarchy is the split of a CP group for "a2a+p2p": the all-to-all group (inner,
// consecutive CP ranks) and the group of the ranks holding the same heads after it
// (outer).
type cpHierarchy struct {
	size, rank   int           // in the CP group split
	inner, outer parallel.Comm // a2a and p2p groups
}

// newCPHierarchy splits cp, of a·o ranks, into a2a groups of a = sizes[0] consecutive
// ranks and p2p groups of o = sizes[1] ranks (Megatron's create_hierarchical_groups: CP
// rank r is rank r mod a of a2a group r/a and rank r/a of p2p group r mod a). Every rank
// of cp must call it. It returns the error of a failed split and panics if sizes is not
// two sizes whose product is cp's size.
func newCPHierarchy(ctx context.Context, cp parallel.Comm, sizes []int) (*cpHierarchy, error) {
	n, r := cp.Size(), cp.Rank()
	if len(sizes) != 2 || sizes[0] < 1 || sizes[1] < 1 || sizes[0]*sizes[1] != n {
		panic(fmt.Sprintf("nn: a2a+p2p: hierarchical context-parallel sizes %v are not two sizes multiplying to cp %d", sizes, n))
	}
	a := sizes[0]
	inner, err := cp.Split(ctx, "cp-a2a", r/a, r)
	if err != nil {
		return nil, fmt.Errorf("nn: a2a+p2p: split cp rank %d of %d into a2a groups of %d: %w", r, n, a, err)
	}
	outer, err := cp.Split(ctx, "cp-p2p", r%a, r)
	if err != nil {
		return nil, fmt.Errorf("nn: a2a+p2p: split cp rank %d of %d into p2p groups of %d: %w", r, n, sizes[1], err)
	}
	return &cpHierarchy{size: n, rank: r, inner: inner, outer: outer}, nil
}

// a2aP2P is the "a2a+p2p" context-parallel core over h's groups (a cpAttention, as
// cpA2A). It panics as cpA2A does with the a2a group's size, or if cp is not the group h
// split.
func (h *cpHierarchy) a2aP2P(p *Pass, cp parallel.Comm, q, k, v *tensor.Tensor, o cpAttnOptions) *tensor.Tensor {
	if cp.Size() != h.size || cp.Rank() != h.rank {
		panic(fmt.Sprintf("nn: a2a+p2p: cp rank %d of %d is not the rank %d of %d its hierarchy was split from", cp.Rank(), cp.Size(), h.rank, h.size))
	}
	return a2aAttend(p, h.inner, h.outer, q, k, v, o)
}

// a2aAttend exchanges sequence for heads over inner, gathers the keys and values of the
// outer group's ranks (outer nil: a group of one), attends, and exchanges back: q
// [B, NH/tp, T/cp, HS], k, v [B, G/tp, T/cp, HS] → [B, NH/tp, T/cp, HS], with
// cp = inner·outer.
func a2aAttend(p *Pass, inner, outer parallel.Comm, q, k, v *tensor.Tensor, o cpAttnOptions) *tensor.Tensor {
	a, nOuter, rOuter := inner.Size(), 1, 0
	if outer != nil {
		nOuter, rOuter = outer.Size(), outer.Rank()
	}
	cp, r := a*nOuter, rOuter*a+inner.Rank()
	nh, g := q.Dim(1), k.Dim(1)
	t := q.Dim(2) * cp
	switch {
	case nh%a != 0:
		panic(fmt.Sprintf("nn: context-parallel a2a: %d heads per TP rank not divisible by the a2a group's %d ranks", nh, a))
	case !slices.Equal(o.Positions, CPPositions(t, cp, r)):
		panic(fmt.Sprintf("nn: context-parallel a2a: rank %d of %d: positions %v are not CPPositions(%d, %d, %d)", r, cp, o.Positions, t, cp, r))
	}
	rep := a / gcd(g, a)
	k, v = expandGroups(k, rep), expandGroups(v, rep) // [B, G·rep/tp, T/cp, HS]
	ctx := p.Ctx
	qh := parallel.AllToAllCPSeqToHeads(ctx, inner, q) // [B, NH/(tp·a), T·a/cp, HS]
	kh := parallel.AllToAllCPSeqToHeads(ctx, inner, k) // [B, G·rep/(tp·a), T·a/cp, HS]
	vh := parallel.AllToAllCPSeqToHeads(ctx, inner, v)
	if nOuter > 1 {
		kh, vh = parallel.GatherFromCP(ctx, outer, kh), parallel.GatherFromCP(ctx, outer, vh) // [B, G·rep/(tp·a), T, HS]
	}
	// The queries are chunks rOuter and 2·nOuter−1−rOuter of the sequence cut in
	// 2·nOuter, or with nOuter = 1 the whole sequence in order. A chunk starting at s
	// attends causally to keys 0..s+len−1, of which it is the last: tensor.Attention's
	// causal rule.
	blocks, starts := []*tensor.Tensor{qh}, []int{0}
	if nOuter > 1 {
		m := t / (2 * nOuter)
		blocks, starts = tensor.Chunk(qh, 2, 2), []int{rOuter * m, (2*nOuter - 1 - rOuter) * m} // [B, NH/(tp·a), m, HS] each
	}
	if o.Dropout > 0 { // this rank's heads start at its a-th of the TP rank's
		o.Start = []int{o.Start[0], o.Start[1] + inner.Rank()*(nh/a), o.Start[2], o.Start[3]}
	}
	outs := make([]*tensor.Tensor, len(blocks))
	for i, qb := range blocks {
		ks, vs := kh, vh
		if n := starts[i] + qb.Dim(2); o.Causal && n < t {
			ks, vs = kh.Narrow(2, 0, n), vh.Narrow(2, 0, n) // keys up to the chunk's last
		}
		outs[i], _ = cpAttendBlock(p, qb, ks, vs, o, starts[i], 0, o.Causal) // [B, NH/(tp·a), len, HS]
	}
	return mergeHeads(parallel.AllToAllCPHeadsToSeq(ctx, inner, tensor.Concat(2, outs...))) // [B, NH/tp, T/cp, HS] → [B, T/cp, NH·HS/tp]
}

// gcd returns the greatest common divisor of positive a and b.
func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
