package nn

import "megago/tensor"

// NamedTensor is one tensor of a module's non-trainable state, by its full dotted name
// ("layers.3.mlp.router.expert_bias"): PyTorch's persistent buffers. It is whole, and the
// same on every rank that holds it (every rank of the pipeline stage holding the module).
type NamedTensor struct {
	Name   string
	Tensor *tensor.Tensor
}

// Stateful is implemented by modules that hold non-trainable state beside their
// parameters (a mixture-of-experts router's expert bias): no optimizer updates it, but
// checkpoints save and restore it (checkpoint.State.Tensors). State returns the live
// tensors, so that loading writes into them.
type Stateful interface {
	State() []NamedTensor
}
