package nn

import "megago/tensor"

// releaseDead returns to the pool, before the step's scope closes, an intermediate t that
// a layer made and consumed itself, whose data no backward reads (the ops that consumed
// it, Add of a bias, Narrow, Permute, need only its shape), unless one of the tensors the
// layer goes on to use shares its storage (a view). This keeps a training step's memory
// to the activations that backward needs.
func releaseDead(t *tensor.Tensor, live ...*tensor.Tensor) {
	for _, u := range live {
		if u != nil && t.SharesStorage(u) {
			return
		}
	}
	t.Release()
}
