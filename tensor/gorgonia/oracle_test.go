package gorgonia

// Oracle tests: megago's autograd against gorgonia.org/gorgonia's symbolic differentiation
// on the same float64 inputs. Gorgonia builds the backward graph from its own op
// derivatives, so an error in a megago backward (a transposed GEMM operand, a missing
// broadcast reduction, a wrong softmax Jacobian or causal limit) shows up as a mismatch.

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"
	G "gorgonia.org/gorgonia"
	gtensor "gorgonia.org/tensor"

	"megago/tensor"
)

// oracle is a gorgonia graph whose inputs and constants are copies of megago tensors.
type oracle struct {
	t   *testing.T
	dev *tensor.Device
	g   *G.ExprGraph
}

func newOracle(t *testing.T, dev *tensor.Device) *oracle {
	return &oracle{t: t, dev: dev, g: G.NewGraph()}
}

// input returns a differentiable input node holding a copy of x.
func (o *oracle) input(name string, x *tensor.Tensor) *G.Node {
	return G.NewTensor(o.g, G.Float64, x.Rank(), G.WithShape(x.Shape()...), G.WithName(name), G.WithValue(ToDense(x)))
}

// constant returns a constant node holding a copy of x.
func (o *oracle) constant(name string, x *tensor.Tensor) *G.Node {
	return G.NewConstant(ToDense(x), G.WithName(name))
}

// must fails the test on a graph-building error.
func (o *oracle) must(n *G.Node, err error) *G.Node {
	o.t.Helper()
	require.NoError(o.t, err)
	return n
}

// run differentiates loss with respect to wrt, runs the graph and returns the loss and the
// gradients as megago tensors.
func (o *oracle) run(loss *G.Node, wrt ...*G.Node) (float64, []*tensor.Tensor) {
	o.t.Helper()
	grads, err := G.Grad(loss, wrt...)
	require.NoError(o.t, err)
	vm := G.NewTapeMachine(o.g)
	defer vm.Close()
	require.NoError(o.t, vm.RunAll())
	value, ok := loss.Value().Data().(float64)
	require.Truef(o.t, ok, "loss value is a %T", loss.Value().Data())
	out := make([]*tensor.Tensor, len(grads))
	for i, g := range grads {
		out[i] = o.fromValue(g)
	}
	return value, out
}

func (o *oracle) fromValue(n *G.Node) *tensor.Tensor {
	o.t.Helper()
	d, ok := n.Value().(*gtensor.Dense)
	require.Truef(o.t, ok, "%s: value is a %T", n.Name(), n.Value())
	x, err := FromDense(o.dev, d)
	require.NoError(o.t, err, n.Name())
	return x
}

// requireClose requires got and want to have the same shape and max|got−want| ≤
// rtol·max|want| (relative to the tensor's scale, so entries near zero do not demand more
// than the rest).
func requireClose(t *testing.T, name string, got, want *tensor.Tensor, rtol float64) {
	t.Helper()
	require.Truef(t, got.Shape().Equal(want.Shape()), "%s: shape %v, want %v", name, got.Shape(), want.Shape())
	g, w := tensor.ToSlice[float64](got), tensor.ToSlice[float64](want)
	var diff, scale float64
	for i := range w {
		diff = max(diff, math.Abs(g[i]-w[i]))
		scale = max(scale, math.Abs(w[i]))
	}
	require.Greaterf(t, scale, 0.0, "%s: the reference is all zeros, which checks nothing", name)
	require.LessOrEqualf(t, diff, rtol*scale, "%s: max |Δ| %.3g against max |want| %.3g", name, diff, scale)
}

func requireCloseScalar(t *testing.T, name string, got, want, rtol float64) {
	t.Helper()
	require.LessOrEqualf(t, math.Abs(got-want), rtol*math.Abs(want), "%s: %v, want %v", name, got, want)
}

// normal returns a deterministic N(0, std²) tensor of shape drawn for purpose.
func normal(dev *tensor.Device, purpose string, std float64, shape ...int) *tensor.Tensor {
	return tensor.NewRNG(2024).Named(purpose).Normal(dev, tensor.F64, tensor.Whole(shape...), 0, std)
}

// param is normal marked as requiring grad.
func param(dev *tensor.Device, purpose string, std float64, shape ...int) *tensor.Tensor {
	return normal(dev, purpose, std, shape...).SetRequiresGrad(true)
}

// Both sides compute in float64 and differ only in the order of their sums.
const mlpRTol = 1e-10

// mlpLoss is one way to turn the MLP's logits [N, O] into a scalar loss, on both sides.
type mlpLoss struct {
	megago    func(logits *tensor.Tensor) *tensor.Tensor
	reference func(o *oracle, logits *G.Node) *G.Node
}

// meanSquaredError is mean((logits − y)²) against a random target y [N, O].
func meanSquaredError(dev *tensor.Device, n, classes int) mlpLoss {
	y := normal(dev, "mlp target", 1, n, classes)
	return mlpLoss{
		megago: func(logits *tensor.Tensor) *tensor.Tensor {
			d := tensor.Sub(logits, y)
			return tensor.Mean(tensor.Mul(d, d))
		},
		reference: func(o *oracle, logits *G.Node) *G.Node {
			d := o.must(G.Sub(logits, o.constant("y", y)))
			return o.must(G.Mean(o.must(G.Square(d))))
		},
	}
}

// crossEntropy is the mean over rows of −log softmax(logits)[target]. Gorgonia has no fused
// op: it takes the log-softmax along dim 1 and sums it against −onehot/N.
func crossEntropy(dev *tensor.Device, n, classes int) mlpLoss {
	targets := make([]int64, n)
	weights := make([]float64, n*classes) // −onehot(targets)/N [N, O]
	for i := range targets {
		targets[i] = int64((3*i + 1) % classes)
		weights[i*classes+int(targets[i])] = -1 / float64(n)
	}
	tt := tensor.FromSlice(dev, targets, n)
	w := tensor.FromSlice(dev, weights, n, classes)
	return mlpLoss{
		megago: func(logits *tensor.Tensor) *tensor.Tensor {
			return tensor.CrossEntropy(logits, tt, tensor.CrossEntropyOptions{})
		},
		reference: func(o *oracle, logits *G.Node) *G.Node {
			logp := o.must(G.LogSoftMax(logits, 1))
			return o.must(G.Sum(o.must(G.HadamardProd(logp, o.constant("-onehot/N", w)))))
		},
	}
}

// TestMLPMatchesGorgonia compares loss and gradients of x [N, D] → act(x·W1 + b1)·W2 + b2
// → loss.
func TestMLPMatchesGorgonia(t *testing.T) {
	const n, d, h, classes = 8, 5, 7, 3 // N rows, D inputs, F hidden, O outputs
	tests := []struct {
		name string
		act  func(*tensor.Tensor) *tensor.Tensor
		gact func(*G.Node) (*G.Node, error)
		loss func(dev *tensor.Device, n, classes int) mlpLoss
	}{
		{"tanh/mse", tensor.Tanh, G.Tanh, meanSquaredError},
		{"sigmoid/cross-entropy", tensor.Sigmoid, G.Sigmoid, crossEntropy},
		{"tanh/cross-entropy", tensor.Tanh, G.Tanh, crossEntropy},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dev := tensor.NewCPU()
			x := param(dev, "mlp x", 1, n, d)           // [N, D]
			w1 := param(dev, "mlp w1", 0.5, d, h)       // [D, F]
			b1 := param(dev, "mlp b1", 0.5, h)          // [F]
			w2 := param(dev, "mlp w2", 0.5, h, classes) // [F, O]
			b2 := param(dev, "mlp b2", 0.5, classes)    // [O]
			loss := tc.loss(dev, n, classes)

			hid := tc.act(tensor.Add(tensor.MatMul(x, w1), b1)) // [N, F]
			logits := tensor.Add(tensor.MatMul(hid, w2), b2)    // [N, O]
			l := loss.megago(logits)
			l.Backward()

			o := newOracle(t, dev)
			gx, gw1, gb1, gw2, gb2 := o.input("x", x), o.input("w1", w1), o.input("b1", b1), o.input("w2", w2), o.input("b2", b2)
			ghid := o.must(tc.gact(o.must(G.BroadcastAdd(o.must(G.Mul(gx, gw1)), gb1, nil, []byte{0}))))
			glogits := o.must(G.BroadcastAdd(o.must(G.Mul(ghid, gw2)), gb2, nil, []byte{0}))
			want, grads := o.run(loss.reference(o, glogits), gx, gw1, gb1, gw2, gb2)

			requireCloseScalar(t, "loss", l.Item(), want, mlpRTol)
			for i, p := range []*tensor.Tensor{x, w1, b1, w2, b2} {
				requireClose(t, []string{"x", "w1", "b1", "w2", "b2"}[i], p.Grad(), grads[i], mlpRTol)
			}
		})
	}
}

// Both sides compute in float64; the masked logits are exactly zero after exp on both.
const attentionRTol = 1e-9

// maskedLogitValue stands for −∞ in gorgonia's additive causal mask: exp of it underflows to
// exactly 0 in float64, as megago's masked positions are.
const maskedLogitValue = -1e9

// causalMask returns the additive mask [T, T]: 0 on and below the diagonal, a large negative
// value above it.
func causalMask(dev *tensor.Device, t int) *tensor.Tensor {
	m := make([]float64, t*t)
	for i := range t {
		for j := i + 1; j < t; j++ {
			m[i*t+j] = maskedLogitValue
		}
	}
	return tensor.FromSlice(dev, m, t, t)
}

// head builds one causal attention head for one sequence: softmax(q·kᵀ/√HS + mask)·v
// with q = x·wq, k = x·wk, v = x·wv. x is [T, C], the weights [C, HS]; it returns [T, HS].
func (o *oracle) head(x, wq, wk, wv, mask *G.Node, hs int) *G.Node {
	q := o.must(G.Mul(x, wq))                                                // [T, HS]
	k := o.must(G.Mul(x, wk))                                                // [T, HS]
	v := o.must(G.Mul(x, wv))                                                // [T, HS]
	scores := o.must(G.Mul(q, o.must(G.Transpose(k))))                       // [T, T]
	scaled := o.must(G.Mul(scores, G.NewConstant(1/math.Sqrt(float64(hs))))) // [T, T]
	att := o.must(G.SoftMax(o.must(G.Add(scaled, mask)), 1))                 // [T, T], softmax along dim 1 (each row)
	return o.must(G.Mul(att, v))                                             // [T, HS]
}

// TestAttentionMatchesGorgonia compares a single-head causal self-attention block:
// loss = Σ (softmax_causal(q·kᵀ/√HS)·v·Wo) ⊙ R.
func TestAttentionMatchesGorgonia(t *testing.T) {
	const T, C, HS = 5, 6, 4
	dev := tensor.NewCPU()
	x := param(dev, "attn x", 1, T, C)      // [T, C]
	wq := param(dev, "attn wq", 0.5, C, HS) // [C, HS]
	wk := param(dev, "attn wk", 0.5, C, HS) // [C, HS]
	wv := param(dev, "attn wv", 0.5, C, HS) // [C, HS]
	wo := param(dev, "attn wo", 0.5, HS, C) // [HS, C]
	r := normal(dev, "attn r", 1, T, C)     // [T, C]

	q, k, v := tensor.MatMul(x, wq), tensor.MatMul(x, wk), tensor.MatMul(x, wv) // [T, HS]
	scores := tensor.MatMulT(q, k, false, true)                                 // [T, T]
	att := tensor.Softmax(scores, tensor.SoftmaxOptions{Scale: 1 / math.Sqrt(HS), Causal: true})
	out := tensor.MatMul(tensor.MatMul(att, v), wo) // [T, C]
	l := tensor.Sum(tensor.Mul(out, r))
	l.Backward()

	o := newOracle(t, dev)
	gx, gwq, gwk, gwv, gwo := o.input("x", x), o.input("wq", wq), o.input("wk", wk), o.input("wv", wv), o.input("wo", wo)
	y := o.head(gx, gwq, gwk, gwv, o.constant("mask", causalMask(dev, T)), HS)
	gout := o.must(G.Mul(y, gwo))
	want, grads := o.run(o.must(G.Sum(o.must(G.HadamardProd(gout, o.constant("r", r))))), gx, gwq, gwk, gwv, gwo)

	requireCloseScalar(t, "loss", l.Item(), want, attentionRTol)
	for i, p := range []*tensor.Tensor{x, wq, wk, wv, wo} {
		requireClose(t, []string{"x", "wq", "wk", "wv", "wo"}[i], p.Grad(), grads[i], attentionRTol)
	}
}

// TestMultiHeadAttentionMatchesGorgonia compares batched multi-head causal attention, which
// megago runs as one graph over [B, NH, T, HS] (shared-weight batched GEMMs, Reshape and
// Permute), against a gorgonia graph with one head per sequence and per head: head h uses
// columns h·HS… of Wq, Wk, Wv and rows h·HS… of Wo, and the heads' outputs are summed,
// which is concatenation followed by the output projection.
func TestMultiHeadAttentionMatchesGorgonia(t *testing.T) {
	const B, T, C, NH = 2, 5, 8, 2
	const HS = C / NH
	dev := tensor.NewCPU()
	x := param(dev, "mha x", 1, B, T, C)  // [B, T, C]
	wq := param(dev, "mha wq", 0.5, C, C) // [C, NH·HS]
	wk := param(dev, "mha wk", 0.5, C, C) // [C, NH·HS]
	wv := param(dev, "mha wv", 0.5, C, C) // [C, NH·HS]
	wo := param(dev, "mha wo", 0.5, C, C) // [NH·HS, C]
	r := normal(dev, "mha r", 1, B, T, C) // [B, T, C]

	heads := func(p *tensor.Tensor) *tensor.Tensor { // [B, T, C] → [B, NH, T, HS]
		return p.Reshape(B, T, NH, HS).Permute(0, 2, 1, 3)
	}
	q, k, v := heads(tensor.MatMul(x, wq)), heads(tensor.MatMul(x, wk)), heads(tensor.MatMul(x, wv))
	att := tensor.Softmax(tensor.MatMulT(q, k, false, true), tensor.SoftmaxOptions{Scale: 1 / math.Sqrt(HS), Causal: true}) // [B, NH, T, T]
	y := tensor.MatMul(att, v).Permute(0, 2, 1, 3).Reshape(B, T, C)                                                         // [B, T, C]
	l := tensor.Sum(tensor.Mul(tensor.MatMul(y, wo), r))
	l.Backward()

	o := newOracle(t, dev)
	mask := o.constant("mask", causalMask(dev, T))
	var wrt []*G.Node
	in := func(name string, p *tensor.Tensor) *G.Node {
		n := o.input(name, p)
		wrt = append(wrt, n)
		return n
	}
	var gwq, gwk, gwv, gwo [NH]*G.Node
	for h := range NH {
		gwq[h] = in(fmt.Sprintf("wq%d", h), wq.Narrow(1, h*HS, HS)) // [C, HS]
		gwk[h] = in(fmt.Sprintf("wk%d", h), wk.Narrow(1, h*HS, HS)) // [C, HS]
		gwv[h] = in(fmt.Sprintf("wv%d", h), wv.Narrow(1, h*HS, HS)) // [C, HS]
		gwo[h] = in(fmt.Sprintf("wo%d", h), wo.Narrow(0, h*HS, HS)) // [HS, C]
	}
	var loss *G.Node
	for b := range B {
		xb := in(fmt.Sprintf("x%d", b), x.Narrow(0, b, 1).Reshape(T, C)) // [T, C]
		var out *G.Node                                                  // [T, C]
		for h := range NH {
			oh := o.must(G.Mul(o.head(xb, gwq[h], gwk[h], gwv[h], mask, HS), gwo[h]))
			if out == nil {
				out = oh
			} else {
				out = o.must(G.Add(out, oh))
			}
		}
		rb := o.constant(fmt.Sprintf("r%d", b), r.Narrow(0, b, 1).Reshape(T, C))
		lb := o.must(G.Sum(o.must(G.HadamardProd(out, rb))))
		if loss == nil {
			loss = lb
		} else {
			loss = o.must(G.Add(loss, lb))
		}
	}
	want, grads := o.run(loss, wrt...)

	requireCloseScalar(t, "loss", l.Item(), want, attentionRTol)
	for h := range NH {
		g := grads[4*h : 4*h+4]
		requireClose(t, fmt.Sprintf("wq head %d", h), wq.Grad().Narrow(1, h*HS, HS), g[0], attentionRTol)
		requireClose(t, fmt.Sprintf("wk head %d", h), wk.Grad().Narrow(1, h*HS, HS), g[1], attentionRTol)
		requireClose(t, fmt.Sprintf("wv head %d", h), wv.Grad().Narrow(1, h*HS, HS), g[2], attentionRTol)
		requireClose(t, fmt.Sprintf("wo head %d", h), wo.Grad().Narrow(0, h*HS, HS), g[3], attentionRTol)
	}
	for b := range B {
		requireClose(t, fmt.Sprintf("x batch %d", b), x.Grad().Narrow(0, b, 1).Reshape(T, C), grads[4*NH+b], attentionRTol)
	}
}
