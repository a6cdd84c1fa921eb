package nn

import (
	"fmt"
	"math"

	"megago/tensor"
)

// RelativePositionBias is T5's relative attention bias: a table of one scalar per head for
// each of NB buckets of the relative position key − query, added to the attention scores
// of every layer of a stack (Hugging Face keeps the table in block 0 only and reuses the
// bias it computes). The table is split over TP by heads, like the attention heads it
// biases: rank r holds heads [r·NH/tp, (r+1)·NH/tp).
type RelativePositionBias struct {
	Weight *Param // [NB, NH/tp]

	// Bidirectional buckets look both ways (T5's encoder); otherwise only keys at or before
	// the query are told apart (the decoder).
	Bidirectional bool
	// NumBuckets is NB; MaxDistance is the distance from which every position shares the
	// last bucket (T5: 32 and 128).
	NumBuckets, MaxDistance int
}

// NewRelativePositionBias creates name.weight [numBuckets, heads], split by heads over
// TP. It panics if heads is not divisible by the TP size.
func NewRelativePositionBias(b *Builder, name string, numBuckets, maxDistance, heads int, bidirectional bool, init Init) *RelativePositionBias {
	w := newParam(b, name+".weight", tensor.Shape{numBuckets, heads}, 1, init)
	return &RelativePositionBias{Weight: w, Bidirectional: bidirectional, NumBuckets: numBuckets, MaxDistance: maxDistance}
}

// Params returns the table.
func (r *RelativePositionBias) Params() []*Param { return []*Param{r.Weight} }

// Forward returns the bias of this rank's heads for tq queries at positions
// [pastLen, pastLen+tq) and tk keys at positions [0, tk), [1, NH/tp, Tq, Tk], ready for
// AttentionMask.Bias.
func (r *RelativePositionBias) Forward(tq, tk, pastLen int) *tensor.Tensor {
	w := r.Weight.Tensor
	buckets := make([]int64, tq*tk)
	for i := 0; i < tq; i++ {
		for j := 0; j < tk; j++ {
			buckets[i*tk+j] = int64(RelativePositionBucket(j-(pastLen+i), r.Bidirectional, r.NumBuckets, r.MaxDistance))
		}
	}
	idx := tensor.FromSlice(w.Device(), buckets, tq, tk)
	bias := tensor.Embedding(w, idx)                          // [Tq, Tk, NH/tp]
	return bias.Permute(2, 0, 1).Reshape(1, w.Dim(1), tq, tk) // [1, NH/tp, Tq, Tk]
}

// RelativePositionBucket returns the bucket of relative position rel = key − query,
// exactly as Hugging Face's T5Attention._relative_position_bucket computes it (in float32,
// truncating the log branch toward zero): with bidirectional, half the buckets are for
// keys after the query; within a direction, the first half of its buckets are exact
// distances and the rest grow logarithmically up to maxDistance. Without bidirectional,
// keys after the query all share bucket 0. It panics if numBuckets < 4 (2 per direction
// exact) or maxDistance is not larger than the exact range.
func RelativePositionBucket(rel int, bidirectional bool, numBuckets, maxDistance int) int {
	bucket := 0
	n := numBuckets
	if bidirectional {
		n /= 2
		if rel > 0 {
			bucket = n
		}
		rel = max(rel, -rel)
	} else {
		rel = max(-rel, 0)
	}
	exact := n / 2
	if exact < 1 || maxDistance <= exact {
		panic(fmt.Sprintf("nn: RelativePositionBucket: %d buckets (bidirectional %v) with max distance %d", numBuckets, bidirectional, maxDistance))
	}
	if rel < exact {
		return bucket + rel
	}
	// float32 throughout, as torch computes it on a float32 tensor.
	l := float32(math.Log(float64(float32(rel) / float32(exact))))
	l /= float32(math.Log(float64(maxDistance) / float64(exact)))
	large := exact + int(l*float32(n-exact))
	return bucket + min(large, n-1)
}
