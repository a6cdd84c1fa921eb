package tensor

import "fmt"

// node is one recorded op of the autograd graph.
type node struct {
	op       string
	inputs   []*Tensor                     // the op's tensor inputs, in order
	backward func(gys []*Tensor) []*Tensor // output grads → input grads (nil: none)
	nout     int
	freed    bool

	dev       *Device
	outShapes []Shape // to make zero gradients for outputs that received none
	outTypes  []DType
}

// SetRequiresGrad marks a leaf tensor (a parameter, or a pipeline stage's input) so that
// backward computes its gradient, and returns it. It panics if t is the output of an op.
func (t *Tensor) SetRequiresGrad(on bool) *Tensor {
	if t.fn != nil {
		panic(fmt.Sprintf("tensor: SetRequiresGrad: %v %v is the output of %s, not a leaf", t.dtype, t.shape, t.fn.op))
	}
	t.requiresGrad = on
	return t
}

// RequiresGrad reports whether gradients flow to t.
func (t *Tensor) RequiresGrad() bool { return t.requiresGrad }

// IsLeaf reports whether t was not produced by a recorded op.
func (t *Tensor) IsLeaf() bool { return t.fn == nil }

// Grad returns the gradient accumulated in a leaf by backward passes, or nil. After
// ZeroGrad it writes the zeros that ZeroGrad deferred, if no gradient has arrived since.
// Like every method that changes a tensor, it must not run concurrently with another on
// the same tensor.
func (t *Tensor) Grad() *Tensor {
	if t.gradZero {
		t.gradZero = false
		t.st.dev.backend.Fill(t.grad.Span(), 0)
	}
	return t.grad
}

// SetGrad replaces t's accumulated gradient (nil clears it). Optimizers and gradient
// buffers use it to point gradients into flat storage.
func (t *Tensor) SetGrad(g *Tensor) {
	if g != nil && (!g.shape.Equal(t.shape) || g.dtype != t.dtype) {
		panic(fmt.Sprintf("tensor: SetGrad: grad %v %v for tensor %v %v", g.dtype, g.shape, t.dtype, t.shape))
	}
	t.grad, t.gradZero = g, false
}

// ZeroGrad sets t's accumulated gradient to zero, keeping its storage, without writing
// it: the next backward pass stores its gradient instead of adding it (saving a pass over
// memory, like PyTorch's zero_grad(set_to_none=True)), and Grad writes the zeros if none
// arrives. Other views of the gradient's storage (an optimizer's flat buffer) see the
// old contents until then: call Grad before reading them.
func (t *Tensor) ZeroGrad() {
	if t.grad != nil {
		t.gradZero = true
	}
}

// Detach returns a tensor sharing t's storage that is not connected to the graph.
func (t *Tensor) Detach() *Tensor {
	return &Tensor{st: t.st, off: t.off, dtype: t.dtype, shape: t.shape}
}

// recording reports whether an op on these inputs must be recorded.
func recording(ins ...*Tensor) bool {
	for _, x := range ins {
		if x != nil && x.requiresGrad {
			return x.st.dev.GradEnabled()
		}
	}
	return false
}

// record links outs to the op that produced them when any input requires grad and
// recording is on. backward receives one gradient per output (zeros for outputs that got
// none) and returns one per input (nil where none flows).
func record(op string, outs []*Tensor, ins []*Tensor, backward func(gys []*Tensor) []*Tensor) {
	if !recording(ins...) {
		return
	}
	link(op, outs, ins, backward)
}

// link records the op unconditionally (Checkpoint records when the parameters used inside
// it require grad, even if none of its inputs does).
func link(op string, outs []*Tensor, ins []*Tensor, backward func(gys []*Tensor) []*Tensor) {
	n := &node{op: op, inputs: ins, backward: backward, nout: len(outs), dev: outs[0].st.dev}
	for i, o := range outs {
		n.outShapes = append(n.outShapes, o.shape)
		n.outTypes = append(n.outTypes, o.dtype)
		o.requiresGrad = true
		o.fn = n
		o.outIdx = i
	}
}

// record1 is record for an op with one output.
func record1(op string, out *Tensor, ins []*Tensor, backward func(gy *Tensor) []*Tensor) *Tensor {
	record(op, []*Tensor{out}, ins, func(gys []*Tensor) []*Tensor { return backward(gys[0]) })
	return out
}

// needsGrad reports whether gradient must flow to x.
func needsGrad(x *Tensor) bool { return x != nil && x.requiresGrad }

// Backward computes the gradient of the scalar t with respect to every leaf that requires
// grad, adding it to the leaf's Grad. The graph behind t is freed: a second Backward
// through it panics. It panics if t has more than one element.
func (t *Tensor) Backward() {
	if t.Numel() != 1 {
		panic(fmt.Sprintf("tensor: Backward: output of shape %v is not a scalar; use BackwardWithGrad", t.shape))
	}
	Backward([]*Tensor{t}, []*Tensor{Ones(t.st.dev, t.dtype, t.shape...)})
}

// BackwardWithGrad runs backward from a non-scalar t given dy, the gradient of the loss
// with respect to t (a pipeline stage receives it from the next stage).
func (t *Tensor) BackwardWithGrad(dy *Tensor) { Backward([]*Tensor{t}, []*Tensor{dy}) }

// Backward runs one backward pass from several outputs with their gradients.
func Backward(outs, grads []*Tensor) {
	if len(outs) != len(grads) {
		panic(fmt.Sprintf("tensor: Backward: %d outputs and %d gradients", len(outs), len(grads)))
	}
	if len(outs) == 0 {
		return
	}
	dev := outs[0].st.dev
	dev.NoGrad(func() { runBackward(outs, grads) })
}

func runBackward(outs, grads []*Tensor) {
	pending := map[*node][]*Tensor{}
	temps := newGradTemps(outs[0].st.dev)
	var roots []*node
	hooks := hookCounts(outs)
	for i, o := range outs {
		g := grads[i]
		if !g.shape.Equal(o.shape) {
			panic(fmt.Sprintf("tensor: Backward: gradient %v for output %v", g.shape, o.shape))
		}
		if !o.requiresGrad {
			continue
		}
		if o.fn == nil {
			accumulateLeaf(o, g)
			hooks.done(o, true)
			continue
		}
		if o.fn.freed {
			panic(fmt.Sprintf("tensor: Backward: the graph through %s was already freed by an earlier backward", o.fn.op))
		}
		addPending(pending, temps, o, g)
		roots = append(roots, o.fn)
	}
	order := topoOrder(roots)
	hooks.count(order)
	for _, n := range order {
		gys := pending[n]
		delete(pending, n)
		if gys == nil {
			for _, x := range n.inputs {
				hooks.done(x, false)
			}
			continue // reachable, but no gradient flowed into it
		}
		held := make([]bool, len(gys))
		for i, g := range gys {
			if held[i] = g != nil; !held[i] {
				gys[i] = zerosForOutput(n, i)
			}
		}
		gxs := n.backward(gys)
		for i, g := range gys {
			temps.consumed(g, held[i])
		}
		ins := n.inputs
		n.freed, n.backward, n.inputs = true, nil, nil
		for i, x := range ins {
			if i >= len(gxs) || gxs[i] == nil || !needsGrad(x) {
				if i < len(gxs) && gxs[i] != nil {
					temps.consumed(gxs[i], false)
				}
				hooks.done(x, false)
				continue
			}
			g := gxs[i]
			if g == gradAccumulated {
				hooks.done(x, true)
				continue
			}
			if !g.shape.Equal(x.shape) {
				panic(fmt.Sprintf("tensor: backward of %s: gradient %v for input %d of shape %v", n.op, g.shape, i, x.shape))
			}
			switch {
			case x.fn == nil:
				accumulateLeaf(x, g)
				temps.consumed(g, false)
				hooks.done(x, true)
			case x.fn.freed: // a gradient into a graph an earlier backward freed would be lost
				panic(fmt.Sprintf("tensor: Backward: the graph through %s was already freed by an earlier backward", x.fn.op))
			default:
				addPending(pending, temps, x, g)
			}
		}
		temps.flush()
	}
}

// zerosForOutput makes the zero gradient of output i of n. The node keeps no reference to
// its outputs, so the shape comes from the recorded shapes.
func zerosForOutput(n *node, i int) *Tensor {
	s := n.outShapes[i]
	return Zeros(n.dev, n.outTypes[i], s...)
}

// addPending adds g to the gradient waiting for output x of x.fn.
func addPending(pending map[*node][]*Tensor, temps *gradTemps, x *Tensor, g *Tensor) {
	gs := pending[x.fn]
	if gs == nil {
		gs = make([]*Tensor, x.fn.nout)
		pending[x.fn] = gs
	}
	if g.dtype != x.dtype {
		c := castRaw(g, x.dtype)
		temps.consumed(g, false)
		g = c
	}
	if gs[x.outIdx] == nil {
		gs[x.outIdx] = g
		temps.hold(g)
		return
	}
	sum := empty(g.st.dev, g.dtype, g.shape)
	g.st.dev.backend.Binary(OpAdd, sum.Span(), gs[x.outIdx].Span(), g.Span())
	temps.consumed(gs[x.outIdx], true)
	temps.consumed(g, false)
	gs[x.outIdx] = sum
	temps.hold(sum)
}

// accumulateLeaf adds g into leaf x's gradient. The gradient's storage belongs to x's own
// scope, so it lives as long as x: unscoped for parameters (created outside scopes), released
// with a pipeline stage's input when that micro-batch's scope closes. The temporary leaves
// of recomputation get theirs from the innermost scope.
func accumulateLeaf(x *Tensor, g *Tensor) {
	sink, overwrite := leafGradSink(x)
	dev := x.st.dev
	switch {
	case overwrite:
		dev.backend.Cast(sink.Span(), g.Span()) // a copy when the dtypes agree
	case g.dtype != x.dtype:
		c := castRaw(g, x.dtype)
		defer c.Release()
		dev.backend.Binary(OpAdd, sink.Span(), sink.Span(), c.Span())
	default:
		dev.backend.Binary(OpAdd, sink.Span(), sink.Span(), g.Span())
	}
}

// leafGradSink returns the leaf x's gradient tensor, allocating it on first use, and
// whether its contents count as zero (new, or zeroed by ZeroGrad), so that the next
// gradient must be stored into it rather than added; the caller writes it. Call it only
// when a gradient for x is about to be written.
func leafGradSink(x *Tensor) (sink *Tensor, overwrite bool) {
	dev := x.st.dev
	if x.grad == nil {
		st := dev.alloc(x.dtype, x.Numel(), !x.tempLeaf)
		if !x.tempLeaf {
			dev.adoptLike(st, x.st)
		}
		x.grad = &Tensor{st: st, dtype: x.dtype, shape: x.shape.Clone()}
		return x.grad, true
	}
	overwrite, x.gradZero = x.gradZero, false
	return x.grad, overwrite
}

// gradAccumulated is what a backward function returns for a leaf input whose gradient it
// has already written into the leaf's Grad (see directLeafGrad). It is never modified.
var gradAccumulated = &Tensor{}

// directLeafGrad reports whether a backward function may write the gradient of input x
// into x's Grad itself (then returning gradAccumulated for it), which saves a temporary
// and a pass over memory for weight gradients: x must be a leaf that requires grad.
func directLeafGrad(x *Tensor) bool { return x.fn == nil && x.requiresGrad }

// topoOrder returns the nodes reachable from roots so that every node comes before the
// nodes that produced its inputs.
func topoOrder(roots []*node) []*node {
	visited := map[*node]bool{}
	var post []*node
	type frame struct {
		n *node
		i int
	}
	for _, r := range roots {
		if visited[r] {
			continue
		}
		visited[r] = true
		stack := []frame{{r, 0}}
		for len(stack) > 0 {
			f := &stack[len(stack)-1]
			if f.i < len(f.n.inputs) {
				x := f.n.inputs[f.i]
				f.i++
				if x != nil && x.requiresGrad && x.fn != nil && !visited[x.fn] && !x.fn.freed {
					visited[x.fn] = true
					stack = append(stack, frame{x.fn, 0})
				}
				continue
			}
			post = append(post, f.n)
			stack = stack[:len(stack)-1]
		}
	}
	for i, j := 0, len(post)-1; i < j; i, j = i+1, j-1 {
		post[i], post[j] = post[j], post[i]
	}
	return post
}
