package nn

import (
	"context"

	"megago/parallel"
	"megago/tensor"
)

// mapping is a differentiable TP mapping with the signature of package parallel's
// (CopyToTP, GatherFromSP, ReduceScatterToSP, ...).
type mapping func(ctx context.Context, tp parallel.Comm, x *tensor.Tensor) *tensor.Tensor

// identity is the mapping that leaves x as it is.
func identity(_ context.Context, _ parallel.Comm, x *tensor.Tensor) *tensor.Tensor { return x }

// tpRegion is how activations cross the boundaries of tensor-parallel regions, chosen
// once by the Builder (Builder.region) from its TP group and SequenceParallel and held by
// every layer that communicates. It is where sequence parallelism lives: a layer's
// Forward calls these mappings without knowing which ones it holds.
//
//	                 plain TP                  sequence parallel
//	toColumn         CopyToTP                  GatherFromSP       [B, T(/tp), C] → [B, T, C]
//	fromRow          ReduceFromTP              ReduceScatterToSP  [B, T, O] partial → [B, T(/tp), O]
//	fromEmbedding    identity                  ScatterToSP        [B, T, C] → [B, T(/tp), C]
//	firstPosition    narrow                    all-gather of the ranks' first positions, rank 0's kept
//	dropout region   the whole [B, T, C]       this rank's [B, T/tp, C] of [B, T, C]
type tpRegion struct {
	tp parallel.Comm
	// sp records the choice for entry points that need whole sequences (Generate) to
	// reject it; no forward pass reads it.
	sp bool

	column, row, embedding, first mapping
	// seqParts and seqIndex place this rank's hidden state in the rank's sequence: it is
	// part seqIndex of seqParts equal parts (1 and 0 without sequence parallelism).
	seqParts, seqIndex int
	// cpSize and cpRank place the rank's sequence in the whole one under context
	// parallelism (Builder.CP): it holds CPPositions(T, cpSize, cpRank).
	cpSize, cpRank int
}

// region returns the TP region of the layers b builds.
func (b *Builder) region() tpRegion {
	r := tpRegion{tp: b.TP, column: parallel.CopyToTP, row: parallel.ReduceFromTP, embedding: identity,
		first: firstOfWhole, seqParts: 1, cpSize: 1}
	if b.CP != nil {
		r.cpSize, r.cpRank = b.CP.Size(), b.CP.Rank()
	}
	if b.SequenceParallel {
		r.sp = true
		r.column, r.row, r.embedding = parallel.GatherFromSP, parallel.ReduceScatterToSP, parallel.ScatterToSP
		r.seqParts, r.seqIndex = b.TP.Size(), b.TP.Rank()
		if b.TP.Size() > 1 {
			r.first = firstOfSP
		}
	}
	return r
}

// toColumn maps a hidden state x [B, T, C] ([B, T/tp, C] under sequence parallelism) to
// the input of a column-parallel layer, [B, T, C] on every rank: CopyToTP (backward:
// all-reduce) or GatherFromSP (backward: reduce-scatter).
func (r tpRegion) toColumn(p *Pass, x *tensor.Tensor) *tensor.Tensor { return r.column(p.Ctx, r.tp, x) }

// fromRow sums a row-parallel layer's partial products y [B, T, O] over TP: ReduceFromTP
// giving [B, T, O] (backward: identity) or ReduceScatterToSP giving [B, T/tp, O]
// (backward: all-gather).
func (r tpRegion) fromRow(p *Pass, y *tensor.Tensor) *tensor.Tensor { return r.row(p.Ctx, r.tp, y) }

// fromEmbedding maps the embedding's output x [B, T, C], the same on every rank, to the
// first layer's input: itself, or this rank's [B, T/tp, C] (ScatterToSP; backward:
// all-gather).
func (r tpRegion) fromEmbedding(p *Pass, x *tensor.Tensor) *tensor.Tensor {
	return r.embedding(p.Ctx, r.tp, x)
}

// firstPosition returns the hidden state of each sequence's first position [B, C], whole
// on every rank, from x [B, T, C] ([B, T/tp, C] under sequence parallelism).
func (r tpRegion) firstPosition(p *Pass, x *tensor.Tensor) *tensor.Tensor {
	return r.first(p.Ctx, r.tp, x)
}

// firstOfWhole is firstPosition for a whole sequence x [B, T, C].
func firstOfWhole(_ context.Context, _ parallel.Comm, x *tensor.Tensor) *tensor.Tensor {
	return x.Narrow(1, 0, 1).Reshape(x.Dim(0), x.Dim(2)) // [B, C]
}

// firstOfSP is firstPosition under sequence parallelism, where only TP rank 0 holds it:
// the ranks all-gather their first local positions and keep rank 0's, with a backward
// that keeps each rank's own part (Megatron's gather_from_sequence_parallel_region with
// tensor_parallel_output_grad=False): every rank computes the same from it, so the
// gradient must not be summed over ranks.
func firstOfSP(ctx context.Context, tp parallel.Comm, x *tensor.Tensor) *tensor.Tensor {
	b, c := x.Dim(0), x.Dim(2)
	first := x.Narrow(1, 0, 1)                                    // [B, 1, C]
	all := parallel.GatherFromTP(ctx, tp, first.Permute(0, 2, 1)) // [B, C, tp]
	return all.Narrow(2, 0, 1).Reshape(b, c)
}

// dropout applies hidden dropout with probability prob at site key to x [B, T, C] or,
// under sequence and context parallelism, this rank's positions of the sequence
// ([B, T/tp, C], [B, T/cp, C], [B, T/(cp·tp), C]), so that the mask is the same at every
// layout.
func (r tpRegion) dropout(p *Pass, x *tensor.Tensor, prob float64, key string) *tensor.Tensor {
	return r.byRuns(x, nil, func(x, _ *tensor.Tensor, full tensor.Shape, start []int) *tensor.Tensor {
		return dropout(p, x, prob, key, full, start)
	})
}

// seqRun is a run of consecutive positions of the whole sequence that a rank's hidden
// state holds at consecutive rows.
type seqRun struct{ start, n int }

// seqRuns returns the length of the whole sequence and the runs that the rank's tl rows
// hold, in row order: one run without context parallelism, else at most two (the rank's
// part of its CPPositions).
func (r tpRegion) seqRuns(tl int) (t int, runs []seqRun) {
	first := r.seqIndex * tl // in the rank's CP-local sequence
	t = tl * r.seqParts * r.cpSize
	if r.cpSize == 1 {
		return t, []seqRun{{first, tl}}
	}
	n := t / (2 * r.cpSize)
	for i := first; i < first+tl; {
		chunk, off := r.cpRank, i
		if i >= n {
			chunk, off = 2*r.cpSize-1-r.cpRank, i-n
		}
		k := min(n-off, first+tl-i)
		runs = append(runs, seqRun{chunk*n + off, k})
		i += k
	}
	return t, runs
}

// byRuns applies f to each run of positions of x [B, T_local, C] and of y (nil, or the
// same shape: a residual), with the run's place in the whole sequence [B, T, C] (full and
// start, f's to change; the batch dim is local: dropout numbers samples globally), and
// concatenates the results
// along T. With one run f sees x and y whole.
func (r tpRegion) byRuns(x, y *tensor.Tensor, f func(x, y *tensor.Tensor, full tensor.Shape, start []int) *tensor.Tensor) *tensor.Tensor {
	s := x.Shape()
	t, runs := r.seqRuns(s[1])
	if len(runs) == 1 {
		return f(x, y, tensor.Shape{s[0], t, s[2]}, []int{0, runs[0].start, 0})
	}
	outs := make([]*tensor.Tensor, len(runs))
	row := 0
	for i, run := range runs {
		var yi *tensor.Tensor
		if y != nil {
			yi = y.Narrow(1, row, run.n)
		}
		outs[i] = f(x.Narrow(1, row, run.n), yi, tensor.Shape{s[0], t, s[2]}, []int{0, run.start, 0})
		row += run.n
	}
	return tensor.Concat(1, outs...)
}
