package nn

import (
	"context"

	"megago/parallel"
	"megago/tensor"
)

// dispatchFunc computes the routed part of an MoE block's output for tokens x [N, C]
// routed by r: Σ over each token's experts e of r.Probs[n, e]·expert_e(x[n]), [N, C].
// It moves tokens to the EP ranks holding their experts and back.
type dispatchFunc func(m *MoE, p *Pass, x *tensor.Tensor, r Routing) *tensor.Tensor

// permutation orders the (token, expert) pairs of a routing map that go to experts
// [lo, hi): by expert, then by token (Megatron's permute). Row m of the permuted tokens is
// token tokens[m] for expert experts[m].
type permutation struct {
	tokens, experts []int
	counts          []int // [hi−lo] rows per expert
	numExperts      int   // E, the width of the routing map
}

// permute returns the permutation of routing map mp [N·E] restricted to experts [lo, hi).
func permute(mp []bool, numExperts, lo, hi int) permutation {
	n := len(mp) / numExperts
	pm := permutation{counts: make([]int, hi-lo), numExperts: numExperts}
	for e := lo; e < hi; e++ {
		for t := range n {
			if mp[t*numExperts+e] {
				pm.tokens = append(pm.tokens, t)
				pm.experts = append(pm.experts, e)
				pm.counts[e-lo]++
			}
		}
	}
	return pm
}

// rows returns the permuted tokens of x [N, C]: [M, C]. The gradient is summed back into
// each token's row.
func (pm permutation) rows(x *tensor.Tensor) *tensor.Tensor {
	return pickRows(x, pm.tokens)
}

// combine weighs each permuted row of y [M, C] by its pair's probability in probs
// [N, E] (cast to y's dtype) and sums the rows back into their tokens: [n, C], each
// token's rows added in permuted order (by expert), zero for a token without rows. y and
// probs stay in the graph even when M is 0, so that every rank runs the same backward:
// the collectives before y, and whatever the router attached to probs.
func (pm permutation) combine(y, probs *tensor.Tensor, n int) *tensor.Tensor {
	m, c := y.Dim(0), y.Dim(1)
	flat := make([]int, m) // index of each pair in probs [N·E]
	for row, t := range pm.tokens {
		flat[row] = t*pm.numExperts + pm.experts[row]
	}
	probs = probs.Cast(y.DType())
	if m > 0 {
		y = tensor.Mul(y, pickRows(probs.Reshape(-1, 1), flat)) // [M, C]
	}
	slots := make([][]int, n) // each token's rows
	most := 1                 // with no rows, every token gets the zero row
	for row, t := range pm.tokens {
		slots[t] = append(slots[t], row)
		most = max(most, len(slots[t]))
	}
	idx := make([]int, 0, n*most) // row of each token's slot, m (a zero row) if none
	for _, s := range slots {
		for j := range most {
			row := m
			if j < len(s) {
				row = s[j]
			}
			idx = append(idx, row)
		}
	}
	padded := tensor.Concat(0, y, tensor.Zeros(y.Device(), y.DType(), 1, c)) // [M+1, C]
	out := pickRows(padded, idx)                                             // [n·most, C]
	if most > 1 {
		out = tensor.Sum(out.Reshape(n, most, c), 1)
	}
	if m == 0 {
		out = tensor.Add(out, tensor.Scale(tensor.Sum(probs), 0))
	}
	return out
}

// pickRows returns rows idx of x [R, C]: [len(idx), C], differentiable (the gradient
// of each row is added back into its source row, in idx order).
func pickRows(x *tensor.Tensor, idx []int) *tensor.Tensor {
	if len(idx) == 0 {
		// Still a node of the graph: a rank without rows must run the same collectives
		// in backward as the others.
		return x.Narrow(0, 0, 0)
	}
	ids := make([]int32, len(idx))
	for i, r := range idx {
		ids[i] = int32(r)
	}
	return tensor.Embedding(x, tensor.FromSlice(x.Device(), ids))
}

// allGatherInts all-gathers v (the same length on every rank) over c, in rank order:
// [c.Size()][len(v)]. It panics with the *parallel.Error if communication fails.
func allGatherInts(ctx context.Context, c parallel.Comm, v []int) [][]int {
	out := [][]int{v}
	if c.Size() == 1 {
		return out
	}
	mine := make([]int32, len(v))
	for i, x := range v {
		mine[i] = int32(x)
	}
	cpu := tensor.NewCPU()
	all := tensor.Zeros(cpu, tensor.I32, c.Size(), len(v))
	if err := c.AllGather(ctx, all, tensor.FromSlice(cpu, mine, 1, len(v))); err != nil {
		panic(err)
	}
	flat := tensor.ToSlice[int32](all)
	out = make([][]int, c.Size())
	for r := range out {
		out[r] = make([]int, len(v))
		for i := range v {
			out[r][i] = int(flat[r*len(v)+i])
		}
	}
	return out
}
