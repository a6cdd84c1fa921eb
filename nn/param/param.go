package param

import "megago/tensor"

// Param is a trainable tensor (this rank's shard of it) with the metadata that optimizers,
// gradient reduction and checkpoints need. The embedded tensor requires grad.
type Param struct {
	*tensor.Tensor

	// Name is the parameter's full dotted name ("layers.3.mlp.fc1.weight"); it also keys
	// the parameter's initialization, so it is the same at every parallel layout.
	Name string
	// GlobalShape is the shape of the whole, unsharded parameter.
	GlobalShape tensor.Shape
	// PartitionDim is the dim split over the TP group, or -1 when every TP rank holds the
	// whole parameter. Rank r holds the r-th of tp equal chunks of that dim.
	PartitionDim int
	// PartitionStride is Megatron's partition stride: 1 for a contiguous split (megago lays
	// fused weights out so that every split is contiguous).
	PartitionStride int
	// TPRank is this shard's rank in the TP group.
	TPRank int
	// TPReplicated is set when every TP rank holds an identical copy (norm weights,
	// row-parallel biases); gradient norms count it once.
	TPReplicated bool
	// Shared is set on the second copy of a tied weight (the output layer's copy of the
	// word embedding on the last pipeline stage); gradient norms skip it.
	Shared bool
	// SequenceParallel is set on replicated parameters used on sequence-parallel
	// activations (norm weights under SP): each TP rank's gradient covers only its part of
	// the sequence, so the gradients must be all-reduced over TP before the optimizer step.
	SequenceParallel bool
	// NoWeightDecay excludes the parameter from weight decay (biases and 1-D parameters).
	NoWeightDecay bool
	// Expert is set on a mixture-of-experts layer's expert weights, stacked with the
	// expert index as dim 0 ([E, ...] globally): dim 0 is split over the expert-parallel
	// (EP) group, rank EPRank holding the EPRank-th of EP equal chunks, and PartitionDim
	// (if ≥ 0) over the expert-tensor-parallel group, TPRank being the rank in that group.
	// Their gradients are reduced over the expert-data-parallel group instead of the
	// data-parallel one, and the distributed optimizer shards them over it.
	Expert bool
	// EPRank is this shard's rank in the expert-parallel group (Expert parameters only).
	EPRank int

	beforeForward func() // see SetBeforeForward
}

// Start returns the global index of this shard's first element along each dim.
func (p *Param) Start() []int {
	s := make([]int, len(p.GlobalShape))
	if p.PartitionDim >= 0 {
		s[p.PartitionDim] = p.TPRank * p.Shape()[p.PartitionDim]
	}
	if p.Expert {
		s[0] = p.EPRank * p.Shape()[0]
	}
	return s
}

// Region returns the part of the global parameter this shard holds.
func (p *Param) Region() tensor.Region {
	return tensor.Region{Full: p.GlobalShape, Start: p.Start(), Size: p.Shape()}
}

// SetBeforeForward makes fn run whenever a forward pass is about to read p's values:
// package nn's models call BeforeForward on a layer's parameters before running the
// layer, and on the embedding's and the head's before using them. fn may block; nil
// removes the hook. It is Megatron's forward pre-hook: package optim sets it under the
// overlapped parameter all-gather, to wait until the bucket holding p has been gathered
// (and fn then panics with the gather's error, if it failed). A model of one's own that
// trains with that optimizer must call BeforeForward the same way. Set it before
// training, not while a forward pass runs.
func (p *Param) SetBeforeForward(fn func()) { p.beforeForward = fn }

// BeforeForward runs the function set by SetBeforeForward, if any.
func (p *Param) BeforeForward() {
	if p.beforeForward != nil {
		p.beforeForward()
	}
}
