package nn

import (
	"megago/parallel"
	"megago/tensor"
)

// cpAttention computes the attention core of a context-parallel rank: q [B, NH/tp, T/cp, HS]
// and k, v [B, G/tp, T/cp, HS] hold the rank's positions (CPPositions, in that order; RoPE
// already applied at those global positions); it returns out [B, T/cp, NH·HS/tp], the
// rank's rows of the attention over the whole sequence with the heads side by side
// (mergeHeads's layout, as fusedAttend returns it).
type cpAttention func(p *Pass, cp parallel.Comm, q, k, v *tensor.Tensor, o cpAttnOptions) *tensor.Tensor

// cpAttnOptions is what a cpAttention needs besides its inputs.
type cpAttnOptions struct {
	Causal  bool
	Scale   float64 // of the scores (resolved, never 0)
	Dropout float64 // of the probabilities; 0 outside training
	// Positions are the global positions of the rank's queries (CPPositions).
	Positions []int
	// Full is the probability tensor of the whole sequence whose element indices the
	// dropout mask is drawn at, [B total, NH, T, T]; Start is this rank's corner in it
	// for queries and keys at position 0: [first sample, first head of this TP rank, 0, 0].
	// A block of queries from position i and keys from position j starts at
	// Start + [0, 0, i, j].
	Full  tensor.Shape
	Start []int
	// Key names the dropout site (attnSpec.key).
	Key string
}
