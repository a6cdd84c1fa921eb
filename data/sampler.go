package data

import (
	"fmt"
	"iter"
)

// PretrainingSampler is Megatron's MegatronPretrainingSampler: from Consumed onward the
// sample indices are taken in global batches of Micro·DPSize consecutive indices, and DP
// rank r gets the slice [r·Micro, (r+1)·Micro) of each. A trailing partial global batch
// is dropped. Its whole state is Consumed, so resuming a run needs only the number of
// samples consumed so far.
type PretrainingSampler struct {
	Total    int // samples in the dataset
	Consumed int // samples consumed by all DP ranks before this sampler starts
	Micro    int // micro-batch size per DP rank
	DPRank   int // this rank's data-parallel index
	DPSize   int // data-parallel size
}

// NewPretrainingSampler returns the sampler for the given sizes. It panics if
// micro < 1, dpSize < 1, dpRank is not in [0, dpSize), total < 0 or consumed is not in
// [0, total].
func NewPretrainingSampler(total, consumed, micro, dpRank, dpSize int) PretrainingSampler {
	if micro < 1 || dpSize < 1 || dpRank < 0 || dpRank >= dpSize || total < 0 || consumed < 0 || consumed > total {
		panic(fmt.Sprintf("data: NewPretrainingSampler(total %d, consumed %d, micro %d, dp rank %d of %d)",
			total, consumed, micro, dpRank, dpSize))
	}
	return PretrainingSampler{Total: total, Consumed: consumed, Micro: micro, DPRank: dpRank, DPSize: dpSize}
}

// NumBatches returns how many micro-batches the sampler yields.
func (s PretrainingSampler) NumBatches() int {
	return (s.Total - s.Consumed) / (s.Micro * s.DPSize)
}

// Batch returns the sample indices of micro-batch k (counting from Consumed). It panics
// if k is not in [0, NumBatches()).
func (s PretrainingSampler) Batch(k int) []int {
	if k < 0 || k >= s.NumBatches() {
		panic(fmt.Sprintf("data: PretrainingSampler.Batch(%d) of %d", k, s.NumBatches()))
	}
	start := s.Consumed + k*s.Micro*s.DPSize + s.DPRank*s.Micro
	idx := make([]int, s.Micro)
	for i := range idx {
		idx[i] = start + i
	}
	return idx
}

// Batches yields every micro-batch in order, each a new slice.
func (s PretrainingSampler) Batches() iter.Seq[[]int] {
	return func(yield func([]int) bool) {
		for k := range s.NumBatches() {
			if !yield(s.Batch(k)) {
				return
			}
		}
	}
}
