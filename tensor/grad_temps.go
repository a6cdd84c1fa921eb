package tensor

// gradTemps returns to the pool, during one backward pass, the gradients that the pass made
// and no longer needs: a node's output gradients once its backward has run, a gradient once
// added into a leaf's Grad or into a sum, gradients for inputs that need none. Without it
// every intermediate gradient would live until the step's scope closes, doubling the memory
// of a backward pass. Only storage allocated after the pass began, or given up by GradOver,
// is released (never the caller's dy, a saved activation or a parameter), and only when no gradient still waiting in
// the pass shares it: a backward function may return one tensor, or views of it, for several
// inputs, and only storage, not tensors, is counted.
type gradTemps struct {
	dev   *Device
	since uint64           // dev's allocation count when the pass began
	refs  map[*storage]int // storages of gradients waiting in the pass
	done  []*storage       // consumed since the last flush
}

func newGradTemps(dev *Device) *gradTemps {
	return &gradTemps{dev: dev, since: dev.allocCount(), refs: map[*storage]int{}}
}

// hold counts g as waiting in the pass.
func (r *gradTemps) hold(g *Tensor) { r.refs[g.st]++ }

// consumed records that the pass is done with g (wasHeld: g was counted by hold), so flush
// may release its storage.
func (r *gradTemps) consumed(g *Tensor, wasHeld bool) {
	if g == gradAccumulated {
		return
	}
	if wasHeld {
		r.refs[g.st]--
	}
	if g.st.gen > r.since || g.st.gradOver {
		r.done = append(r.done, g.st)
	}
}

// GradOver returns a tensor sharing t's storage, for a Function's Backward to write a
// gradient of t's shape over t and return it: the backward pass then releases the storage,
// t's included, once it is done with the gradient, as it does with the gradients it
// allocates. Use it only for a t that nothing reads after the Backward (using it after
// the release panics); it saves a buffer of t's size, as the vocabulary-parallel cross
// entropy does with the logits.
func GradOver(t *Tensor) *Tensor {
	t.checkLive("GradOver")
	t.st.gradOver = true
	return t.Detach()
}

// flush releases the consumed storages that no waiting gradient shares.
func (r *gradTemps) flush() {
	if len(r.done) == 0 {
		return
	}
	d := r.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, st := range r.done {
		if r.refs[st] <= 0 {
			delete(r.refs, st)
			d.releaseLocked(st)
		}
	}
	r.done = r.done[:0]
}
