package optim

import (
	"megago/nn/param"
	"megago/parallel"
	"megago/tensor"
)

// shard is the part of one bucket that this rank's optimizer updates: the whole bucket,
// or its rank-th 1/DP slice under the distributed optimizer (1/ExpertDP for a buffer of
// expert parameters). All its tensors are views of length hi − lo.
type shard struct {
	buf    *Buffer
	bucket int
	lo, hi int           // range within the buffer
	dp     parallel.Comm // the group the bucket is reduced (and gathered) over: DP or ExpertDP

	master *tensor.Tensor   // master weights: a view of buf.Params when they share its dtype
	model  *tensor.Tensor   // the slice of buf.Params refreshed from master; nil when master is it
	grad   *tensor.Tensor   // the slice of buf.MainGrads
	state  []*tensor.Tensor // one per Rule.stateNames

	segs       []segment
	kernelSegs []tensor.OptimSegment // segs with this step's lr and wd
}

// segment is the part of one parameter inside a shard.
type segment struct {
	param  *param.Param
	lo, hi int // shard-relative
	flat   int // index of the segment's first element in the parameter's flattening
	mult   Multipliers
	counts bool // counts toward the gradient norm
}

// countsTowardNorm reports whether p's gradient enters the global norm on a rank whose TP
// rank is tpRank: every element once over the model-parallel group, so a TP-replicated
// parameter counts on TP rank 0 only and the shared copy of a tied embedding never
// (Megatron's param_is_not_tensor_parallel_duplicate and param_is_not_shared).
func countsTowardNorm(p *param.Param, tpRank int) bool {
	return !p.Shared && (!p.TPReplicated || tpRank == 0)
}

// newShard makes the shard [lo, hi) of bucket k of b, reduced over dp. at is the shard's
// offset in the per-buffer storage of master weights (master, nil when the params are
// the master) and state; tpRank is the rank in the (expert-)TP group.
func newShard(b *Buffer, k, lo, hi, at int, dp parallel.Comm, master *tensor.Tensor, state []*tensor.Tensor,
	mult func(*param.Param) Multipliers, tpRank int) *shard {
	n := hi - lo
	sh := &shard{buf: b, bucket: k, lo: lo, hi: hi, dp: dp, grad: b.MainGrads.Narrow(0, lo, n)}
	if master != nil {
		sh.master = master.Narrow(0, at, n)
		sh.model = b.Params.Narrow(0, lo, n)
		sh.master.CopyFrom(sh.model)
	} else {
		sh.master = b.Params.Narrow(0, lo, n)
	}
	for _, s := range state {
		sh.state = append(sh.state, s.Narrow(0, at, n))
	}
	for _, e := range b.Entries {
		if e.Bucket != k {
			continue
		}
		s, t := max(e.Off, lo), min(e.Off+e.Param.Numel(), hi)
		if s >= t {
			continue
		}
		sh.segs = append(sh.segs, segment{param: e.Param, lo: s - lo, hi: t - lo, flat: s - e.Off,
			mult: mult(e.Param), counts: countsTowardNorm(e.Param, tpRank)})
	}
	sh.kernelSegs = make([]tensor.OptimSegment, len(sh.segs))
	return sh
}

// setRates fills kernelSegs with the base lr and wd times each parameter's multipliers.
func (sh *shard) setRates(lr, wd float64) {
	for i, s := range sh.segs {
		sh.kernelSegs[i] = tensor.OptimSegment{Off: s.lo, N: s.hi - s.lo, LR: lr * s.mult.LR, WeightDecay: wd * s.mult.WD}
	}
}

// sumSquares returns the sum of squared main gradients over the shard's segments that
// count toward the norm, and over all of them (for the inf/nan check).
func (sh *shard) sumSquares(be tensor.Backend) (counted, all float64) {
	if len(sh.segs) == 0 {
		return 0, 0
	}
	ranges := make([][2]int, len(sh.segs))
	for i, s := range sh.segs {
		ranges[i] = [2]int{s.lo, s.hi}
	}
	dst := tensor.Empty(sh.grad.Device(), tensor.F64, len(ranges))
	defer dst.Release()
	be.SumSquares(dst.Span(), sh.grad.Span(), ranges)
	for i, v := range tensor.ToSlice[float64](dst) {
		all += v
		if sh.segs[i].counts {
			counted += v
		}
	}
	return counted, all
}
