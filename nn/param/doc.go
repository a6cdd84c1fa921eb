// Package param holds Param, a trainable tensor — this rank's shard of a global parameter —
// with the metadata that optimizers, gradient reduction and checkpoints need: the
// parameter's global name and shape, the dim split over the tensor-parallel group and
// this shard's rank in it, and whether it is TP-replicated, a Shared copy of a tied
// weight, used on sequence-parallel activations, or excluded from weight decay.
//
// It is a leaf below nn, importing only tensor, so that code needing a parameter but no
// layer (package optim) depends on this package alone. Package nn creates Params (with
// its Builder and Init) and names the type nn.Param, an alias of param.Param; the two
// names are the same type.
//
// # Reading order
//
//   - param.go: Param, Start and Region.
//
// # Invariants
//
// A Param's tensor is this shard; GlobalShape is the whole parameter's shape. With
// PartitionDim d ≥ 0, TP rank r holds the r-th of tp equal chunks of dim d (Start gives
// its first global index, Region the block it covers); with d = −1 every TP rank holds
// the whole parameter and TPRank is 0. The metadata is set once, when nn builds the
// parameter; optimizers and checkpoints read it and update the tensor's values in place.
// The one hook a Param carries (SetBeforeForward) is set by whoever owns its storage (an
// optimizer that gathers it in the background) and called by forward passes.
package param
