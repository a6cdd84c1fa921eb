package nn

import (
	"megago/parallel"
	"megago/tensor"
)

// allToAllDispatch is Megatron's alltoall token dispatcher: each rank permutes its tokens
// by expert, sends each EP rank the rows for its experts (AllToAllRows over EP), with
// expert-TP all-gathers the rows of the expert-TP group (GatherRowsV), sorts them by
// local expert, runs the experts, and undoes each step in reverse (the partial products
// of the expert-TP ranks summed by ReduceScatterRowsV); the rows back home are weighed by
// their probabilities and summed per token.
func allToAllDispatch(m *MoE, p *Pass, x *tensor.Tensor, r Routing) *tensor.Tensor {
	ep, etp := m.groups.EP, m.groups.TP
	pm := permute(r.Map, m.experts, 0, m.experts)
	pl := m.planAllToAll(p, pm.counts)
	xs := parallel.AllToAllRows(p.Ctx, ep, pm.rows(x), pl.send, pl.recv) // [R, C] by source EP rank, local expert
	xs = parallel.GatherRowsV(p.Ctx, etp, xs, pl.fromTP)                 // [R', C] by source expert-TP rank, EP rank, local expert
	y := m.Experts.Forward(p, reorder(xs, pl.sort), pl.counts)           // [R', C] by local expert, partial over expert-TP
	y = parallel.ReduceScatterRowsV(p.Ctx, etp, reorder(y, pl.unsort), pl.fromTP)
	y = parallel.AllToAllRows(p.Ctx, ep, y, pl.recv, pl.send) // [M, C]
	return pm.combine(y, r.Probs, x.Dim(0))
}

// allToAllPlan is the row counts and orders of one alltoall dispatch.
type allToAllPlan struct {
	send, recv []int // [ep] rows sent to and received from each EP rank
	fromTP     []int // [etp] rows each expert-TP rank received over EP
	counts     []int // [E/ep] rows per local expert, over the whole expert TP×EP group
	// sort orders the gathered rows by local expert (nil: they already are); unsort
	// is its inverse.
	sort, unsort []int
}

// planAllToAll all-gathers the expert TP×EP group's rows per expert (counts [E] from each
// rank; expert-TP fastest) and plans the dispatch from them.
func (m *MoE) planAllToAll(p *Pass, counts []int) allToAllPlan {
	ep, etp := m.groups.EP.Size(), m.groups.TP.Size()
	q, t := m.groups.EP.Rank(), m.groups.TP.Rank()
	all := allGatherInts(p.Ctx, m.groups.TPEP, counts) // [etp·ep][E], rank q'·etp + t'
	lo := q * m.local
	localRows := func(q2, t2 int) []int { return all[q2*etp+t2][lo : lo+m.local] }
	pl := allToAllPlan{send: make([]int, ep), recv: make([]int, ep), fromTP: make([]int, etp), counts: make([]int, m.local)}
	for q2 := range ep {
		pl.send[q2] = sumInts(counts[q2*m.local : (q2+1)*m.local])
		pl.recv[q2] = sumInts(localRows(q2, t))
		for t2 := range etp {
			pl.fromTP[t2] += sumInts(localRows(q2, t2))
		}
	}
	// The gathered rows are chunks (t', q', e) in that order; sort them to (e, t', q').
	start := make([][]int, 0, etp*ep) // [t'·ep + q'][e] first row of each chunk
	row := 0
	for t2 := range etp {
		for q2 := range ep {
			s := make([]int, m.local)
			for e, n := range localRows(q2, t2) {
				s[e] = row
				row += n
				pl.counts[e] += n
			}
			start = append(start, s)
		}
	}
	if len(start) == 1 {
		return pl // one source: already by local expert
	}
	for e := range m.local {
		for src, s := range start {
			for i := range localRows(src%ep, src/ep)[e] {
				pl.sort = append(pl.sort, s[e]+i)
			}
		}
	}
	pl.unsort = make([]int, len(pl.sort))
	for k, i := range pl.sort {
		pl.unsort[i] = k
	}
	return pl
}

// reorder returns the rows order of x [R, C] (x itself for a nil order).
func reorder(x *tensor.Tensor, order []int) *tensor.Tensor {
	if order == nil {
		return x
	}
	return pickRows(x, order)
}
