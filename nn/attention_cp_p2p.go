package nn

import (
	"time"

	"megago/parallel"
	"megago/tensor"
)

// cpP2P is the "p2p" core, ring attention: in cp steps each rank's keys and values travel
// once around the CP group (parallel.StartRingShift: block i+1's transfer runs while
// block i's attention computes; backward sends each block's gradient back to its owner).
// At step i a rank holds the block of rank (r−i) mod cp, attends each of its two query
// chunks to each visible key chunk of it (skipping invisible ones: under a causal mask a
// step attends half the queries to the whole block or all queries to half of it), and
// the partial outputs of a query chunk are combined by their log-sum-exp (combineLSE).
// Every received block is kept for backward: the keys and values of the whole sequence,
// [B, G/tp, T, HS] each per layer (activation memory of the scores stays 1/cp).
func cpP2P(p *Pass, cp parallel.Comm, q, k, v *tensor.Tensor, o cpAttnOptions) *tensor.Tensor {
	size, rank := cp.Size(), cp.Rank()
	n := q.Dim(2) / 2
	qs := tensor.Chunk(q, 2, 2) // 2 × [B, NH/tp, n, HS]
	qcs := cpChunks(size, rank)
	var parts [2][]cpPartial
	kv := []*tensor.Tensor{k, v} // [B, G/tp, T/cp, HS] each
	for i := range size {
		var wait func() []*tensor.Tensor
		if i < size-1 {
			wait = parallel.StartRingShift(p.Ctx, cp, p.Trace, i, kv...)
		}
		start := time.Now()
		kcs := cpChunks(size, (rank-i+size)%size)
		ks, vs := tensor.Chunk(kv[0], 2, 2), tensor.Chunk(kv[1], 2, 2) // 2 × [B, G/tp, n, HS]
		for a, qc := range qcs {
			for c, kc := range kcs {
				vis := cpVisibility(o.Causal, qc, kc)
				if vis == cpInvisible {
					continue
				}
				out, lse := cpAttendBlock(p, qs[a], ks[c], vs[c], o, qc*n, kc*n, vis == cpDiagonal)
				parts[a] = append(parts[a], cpPartial{out, lse})
			}
		}
		p.Trace.Record(start, parallel.EventCPAttention, i, 0)
		if wait != nil {
			kv = wait()
		}
	}
	return tensor.Concat(2, combineLSE(parts[0]), combineLSE(parts[1])) // [B, NH/tp, T/cp, HS]
}
