package tensor

import "fmt"

// Function is a differentiable operation defined outside the engine: the communication
// mappings of package parallel and fused kernels implement it. Forward runs with gradient
// recording off and may keep what Backward needs in the Function's own fields; Backward
// receives one gradient per output (zeros for outputs that received none) and returns one
// gradient per input, nil where no gradient flows. The gradients Backward receives are valid
// only during the call: the engine returns their storage to the pool once no gradient still
// waiting in the pass shares it (Backward may return them, or views of them, as its results).
type Function interface {
	Forward(in []*Tensor) []*Tensor
	Backward(gradOut []*Tensor) []*Tensor
}

// Apply runs f on in and records it in the graph when any input requires grad. name is
// used in error messages.
func Apply(name string, f Function, in ...*Tensor) []*Tensor {
	if len(in) == 0 {
		panic(fmt.Sprintf("tensor: Apply %s: no inputs", name))
	}
	var outs []*Tensor
	in[0].st.dev.NoGrad(func() { outs = f.Forward(in) })
	// Outputs must be fresh tensors: an output that is an input (or shares its node) would
	// corrupt the graph, so such outputs are wrapped. The slice is copied first: Forward
	// may return in itself, and wrapping must not replace the inputs.
	outs = append([]*Tensor(nil), outs...)
	for i, o := range outs {
		for _, x := range in {
			if o == x {
				outs[i] = o.Detach()
			}
		}
	}
	record(name, outs, in, f.Backward)
	return outs
}

// Checkpoint runs fn on in without keeping its intermediate activations, and recomputes
// them during backward (activation recomputation). fn must be deterministic given its
// inputs: random ops inside it draw from the layout-independent generator with the same
// keys on both runs, so dropout masks are replayed exactly and the gradients are bit for bit
// those of calling fn directly. Parameters used inside fn receive their gradients as usual,
// even when no input requires grad.
//
// The forward runs in a scope of its own: when Checkpoint returns, only the outputs are
// held (in the enclosing scope), and the recomputation during backward likewise frees
// everything but the gradients it returns. It panics if in is empty.
func Checkpoint(fn func(in []*Tensor) []*Tensor, in ...*Tensor) []*Tensor {
	if len(in) == 0 {
		panic("tensor: Checkpoint: no inputs")
	}
	dev := in[0].st.dev
	c := &checkpointFn{fn: fn, in: in}
	var outs []*Tensor
	needGrad := false
	run := func() {
		// Recording during this forward only reveals whether fn uses tensors (parameters)
		// that require grad; the graph is dropped with the scope's intermediates.
		s := dev.NewScope()
		defer s.Close()
		outs = append([]*Tensor(nil), fn(in)...) // fn may return in itself
		for i, o := range outs {
			needGrad = needGrad || o.requiresGrad
			if o.st.scope == s {
				o.Keep()
			}
			outs[i] = o.Detach()
		}
	}
	if dev.GradEnabled() {
		dev.withGrad(run)
	} else {
		run()
	}
	if needGrad && dev.GradEnabled() {
		link("Checkpoint", outs, in, c.Backward)
	}
	return outs
}

type checkpointFn struct {
	fn func(in []*Tensor) []*Tensor
	in []*Tensor
}

// Backward recomputes fn's forward with recording on, from leaves that stand for the
// inputs, and runs backward through it. Its activations live in a scope of their own.
func (c *checkpointFn) Backward(gys []*Tensor) []*Tensor {
	dev := gys[0].st.dev
	s := dev.NewScope()
	defer s.Close()
	leaves := make([]*Tensor, len(c.in))
	for i, x := range c.in {
		leaves[i] = x.Detach()
		leaves[i].requiresGrad = x.requiresGrad
		leaves[i].tempLeaf = true
	}
	var outs []*Tensor
	dev.withGrad(func() { outs = c.fn(leaves) })
	var ro, rg []*Tensor
	for i, o := range outs {
		if o.requiresGrad {
			ro, rg = append(ro, o), append(rg, gys[i])
		}
	}
	runBackward(ro, rg)
	gxs := make([]*Tensor, len(leaves))
	for i, l := range leaves {
		gxs[i] = l.grad
		if l.grad != nil && l.grad.st.scope == s {
			l.grad.Keep()
		}
	}
	c.in = nil
	return gxs
}
