package tensor

// SetGradHook registers fn to be called after a backward pass has added all of its
// gradient contributions to the leaf t's Grad (PyTorch's post-accumulate-grad hook); nil
// removes it. It is called once per backward pass that accumulated into t, on the
// goroutine running backward, while the pass goes on to other tensors: data-parallel
// training starts reducing a bucket of gradients as soon as the hooks of all its
// parameters have fired, overlapping the reduction with the rest of backward. The
// recomputation of a Checkpoint segment is a backward pass of its own, so a leaf used
// both inside and outside a segment (or in two segments) hears once per pass that
// reached it. Detach and views do not carry the hook. It panics if t is not a leaf.
func (t *Tensor) SetGradHook(fn func(*Tensor)) {
	if t.fn != nil {
		panic("tensor: SetGradHook: " + t.fn.op + " output is not a leaf")
	}
	t.gradHook = fn
}

// hookState is how many contributions a hooked leaf still waits for in one backward pass.
type hookState struct {
	left int
	got  bool // some contribution was accumulated
}

// gradHooks tracks the hooked leaves of one backward pass; nil when there are none.
type gradHooks map[*Tensor]*hookState

// hookCounts starts the tracking with the outputs that are themselves hooked leaves.
func hookCounts(outs []*Tensor) gradHooks {
	var h gradHooks
	for _, o := range outs {
		if o.fn == nil && o.gradHook != nil && o.requiresGrad {
			h = h.add(o)
		}
	}
	return h
}

func (h gradHooks) add(x *Tensor) gradHooks {
	if h == nil {
		h = gradHooks{}
	}
	st := h[x]
	if st == nil {
		st = &hookState{}
		h[x] = st
	}
	st.left++
	return h
}

// count adds one expected contribution per input slot of the nodes in order that holds a
// hooked leaf.
func (h *gradHooks) count(order []*node) {
	for _, n := range order {
		for _, x := range n.inputs {
			if x != nil && x.fn == nil && x.gradHook != nil && x.requiresGrad {
				*h = h.add(x)
			}
		}
	}
}

// done records that one contribution to x (accumulated or not) is settled, and calls
// x's hook when it was the last and some gradient arrived.
func (h gradHooks) done(x *Tensor, accumulated bool) {
	if h == nil || x == nil {
		return
	}
	st := h[x]
	if st == nil {
		return
	}
	st.got = st.got || accumulated
	st.left--
	if st.left == 0 {
		delete(h, x)
		if st.got && x.gradHook != nil {
			x.gradHook(x)
		}
	}
}
