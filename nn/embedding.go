package nn

import (
	"fmt"

	"megago/parallel"
	"megago/tensor"
)

// VocabParallelEmbedding looks up token ids in a table of Vp rows (the vocabulary padded
// for TP) split over the TP group: rank r owns rows [r·Vp/tp, (r+1)·Vp/tp). Ids outside a
// rank's range look up zero rows there, and the partial results are summed over TP.
type VocabParallelEmbedding struct {
	Weight *Param // [Vp/tp, C]

	tp     parallel.Comm
	lookup func(e *VocabParallelEmbedding, p *Pass, ids *tensor.Tensor) *tensor.Tensor // serialLookup at tp 1, else parallelLookup
}

// NewVocabParallelEmbedding creates name.weight [vocab, hidden] split by rows. vocab must
// already be padded to a multiple of tp (see PaddedVocab); it panics otherwise.
func NewVocabParallelEmbedding(b *Builder, name string, vocab, hidden int, init Init) *VocabParallelEmbedding {
	if vocab%b.TP.Size() != 0 {
		panic(fmt.Sprintf("nn: VocabParallelEmbedding %s: vocab %d not divisible by tp %d", name, vocab, b.TP.Size()))
	}
	e := &VocabParallelEmbedding{Weight: newParam(b, name+".weight", tensor.Shape{vocab, hidden}, 0, init), tp: b.TP,
		lookup: (*VocabParallelEmbedding).parallelLookup}
	if b.TP.Size() == 1 {
		e.lookup = serialLookup
	}
	return e
}

// Params returns the table.
func (e *VocabParallelEmbedding) Params() []*Param { return []*Param{e.Weight} }

// Forward maps ids [B, T] (I32 or I64) to [B, T, C], the same on every TP rank. It panics
// if an id is outside [0, Vp).
func (e *VocabParallelEmbedding) Forward(p *Pass, ids *tensor.Tensor) *tensor.Tensor {
	return e.lookup(e, p, ids)
}

// serialLookup is Forward for a TP group of one rank, which holds the whole table.
func serialLookup(e *VocabParallelEmbedding, _ *Pass, ids *tensor.Tensor) *tensor.Tensor {
	return tensor.Embedding(e.Weight.Tensor, ids)
}

// parallelLookup is Forward over TP: each rank looks up the ids in its rows (zero rows
// for the others) and the parts are summed by ReduceFromTP.
func (e *VocabParallelEmbedding) parallelLookup(p *Pass, ids *tensor.Tensor) *tensor.Tensor {
	rows := e.Weight.Dim(0)
	start := e.tp.Rank() * rows
	all := tensor.ToSlice[int64](ids)
	local := make([]int64, len(all))
	outside := make([]float32, len(all))
	for i, id := range all {
		if id < 0 || id >= int64(rows*e.tp.Size()) {
			panic(fmt.Sprintf("nn: VocabParallelEmbedding: id %d at position %d outside [0, %d)", id, i, rows*e.tp.Size()))
		}
		if id >= int64(start) && id < int64(start+rows) {
			local[i] = id - int64(start)
		} else {
			outside[i] = 1
		}
	}
	dev := ids.Device()
	y := tensor.Embedding(e.Weight.Tensor, tensor.FromSlice(dev, local, ids.Shape()...))      // [B, T, C]
	mask := tensor.FromSlice(dev, outside, append(ids.Shape().Clone(), 1)...).Cast(y.DType()) // [B, T, 1]
	y = tensor.MaskedFill(y, mask, 0)
	return parallel.ReduceFromTP(p.Ctx, e.tp, y)
}

// Embedding is a plain lookup table replicated on every TP rank (positions, token types).
type Embedding struct {
	Weight *Param // [N, C]
}

// NewEmbedding creates name.weight [n, hidden], replicated over TP.
func NewEmbedding(b *Builder, name string, n, hidden int, init Init) *Embedding {
	w := newParam(b, name+".weight", tensor.Shape{n, hidden}, -1, init)
	w.NoWeightDecay = false
	return &Embedding{Weight: w}
}

// Params returns the table.
func (e *Embedding) Params() []*Param { return []*Param{e.Weight} }

// Forward maps ids [...] to [..., C].
func (e *Embedding) Forward(ids *tensor.Tensor) *tensor.Tensor {
	return tensor.Embedding(e.Weight.Tensor, ids)
}
