package nn

import (
	"context"
	"math"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"

	"megago/parallel"
	"megago/tensor"
)

// moeTestTopK is the tests' number of experts per token.
const moeTestTopK = 2

// moeTestConfig is a small MoE layer configuration: C 8, 4 experts of hidden 6, top 2,
// with a large init std so the activations are far from linear.
func moeTestConfig(act Activation, bias bool, mc MoEConfig) TransformerConfig {
	mc.NumExperts, mc.TopK, mc.FFNHidden = 4, moeTestTopK, 6
	return TransformerConfig{NumLayers: 1, Hidden: 8, Heads: 2, FFNHidden: 16, Vocab: 16,
		Activation: act, Bias: bias, InitStd: 0.5, MoE: mc}
}

// moeReference computes an MoE block's output for x [N, C] from its parameters with
// plain loops: Mixtral's routing (softmax over the top-k logits, ties to the lower
// expert), each chosen expert's MLP, the probability-weighted sum, and the (gated)
// shared expert.
func moeReference(m *MoE, x []float64, act Activation) []float64 {
	w := tensor.ToSlice[float64](m.Router.Weight.Tensor)
	e, c := m.Router.Weight.Tensor.Dim(0), m.Router.Weight.Tensor.Dim(1)
	n := len(x) / c
	ex := m.Experts
	f := ex.FC1.Tensor.Dim(1)
	vals := func(p *Param) []float64 {
		if p == nil {
			return nil
		}
		return tensor.ToSlice[float64](p.Tensor)
	}
	fc1, gate, fc2 := vals(ex.FC1), vals(ex.Gate), vals(ex.FC2)
	b1, bg, b2 := vals(ex.FC1Bias), vals(ex.GateBias), vals(ex.FC2Bias)
	at := func(b []float64, i int) float64 {
		if b == nil {
			return 0
		}
		return b[i]
	}
	y := make([]float64, n*c)
	for t := range n {
		xt := x[t*c : (t+1)*c]
		logits := denseRef(xt, w, nil, 1, c, e)
		chosen := refTopK(logits, moeTestTopK)
		z := 0.0
		for _, j := range chosen {
			z += math.Exp(logits[j] - logits[chosen[0]])
		}
		for _, j := range chosen {
			p := math.Exp(logits[j]-logits[chosen[0]]) / z
			h := denseRef(xt, fc1[j*f*c:(j+1)*f*c], nil, 1, c, f)
			var g []float64
			if gate != nil {
				g = denseRef(xt, gate[j*f*c:(j+1)*f*c], nil, 1, c, f)
			}
			for i := range h {
				h[i] = refActivation(act, h[i]+at(b1, j*f+i), g, i, at(bg, j*f+i))
			}
			o := denseRef(h, fc2[j*c*f:(j+1)*c*f], nil, 1, f, c)
			for i := range o {
				y[t*c+i] += p * (o[i] + at(b2, j*c+i))
			}
		}
	}
	if m.Shared != nil {
		addSharedReference(m, x, act, y)
	}
	return y
}

// addSharedReference adds the shared expert's output for x [N, C], gated when m has a
// gate, to y [N, C].
func addSharedReference(m *MoE, x []float64, act Activation, y []float64) {
	s := m.Shared
	f, c := s.FC1.Weight.Tensor.Dim(0), s.FC1.Weight.Tensor.Dim(1)
	for t := range len(x) / c {
		xt := x[t*c : (t+1)*c]
		h := denseRef(xt, tensor.ToSlice[float64](s.FC1.Weight.Tensor), nil, 1, c, f)
		var g []float64
		if s.Gate != nil {
			g = denseRef(xt, tensor.ToSlice[float64](s.Gate.Weight.Tensor), nil, 1, c, f)
		}
		for i := range h {
			h[i] = refActivation(act, h[i], g, i, 0)
		}
		o := denseRef(h, tensor.ToSlice[float64](s.FC2.Weight.Tensor), nil, 1, f, c)
		scale := 1.0
		if m.SharedGate != nil {
			z := denseRef(xt, tensor.ToSlice[float64](m.SharedGate.Tensor), nil, 1, c, 1)[0]
			scale = 1 / (1 + math.Exp(-z))
		}
		for i := range o {
			y[t*c+i] += scale * o[i]
		}
	}
}

// setBiases fills the expert biases of m with distinct non-zero values, so tests see
// them: the same global values at every layout.
func setBiases(m *MoE) {
	for i, p := range []*Param{m.Experts.FC1Bias, m.Experts.GateBias, m.Experts.FC2Bias} {
		if p != nil { // this shard's part of the global values
			reg := p.Region()
			full := tensor.FromSlice(p.Tensor.Device(), seqValues(reg.Full.Numel(), 20+i), reg.Full...)
			p.Tensor.CopyFrom(narrowTo(full, reg.Start, reg.Size))
		}
	}
}

// refTopK returns the indices of the k largest values, ties to the lower index.
func refTopK(v []float64, k int) []int {
	idx := make([]int, len(v))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return v[idx[a]] > v[idx[b]] })
	return idx[:k]
}

// fp64Route returns a route function for m computing Mixtral's routing (softmax over the
// top-k logits) in float64 from the router's weight, whatever precision the router
// itself uses: the reference and finite-difference tests check the block around it.
func fp64Route(m *MoE) func(p *Pass, x *tensor.Tensor) Routing {
	return func(p *Pass, x *tensor.Tensor) Routing {
		w := m.Router.Weight.Tensor
		e := w.Dim(0)
		logits := tensor.MatMulT(x.Reshape(-1, w.Dim(1)), w, false, true) // [N, E]
		vals := tensor.ToSlice[float64](logits)
		r := Routing{Map: make([]bool, len(vals)), TokensPerExpert: make([]int, e)}
		masked := make([]float64, len(vals))
		for i := range masked {
			masked[i] = 1
		}
		for t := range len(vals) / e {
			for _, j := range refTopK(vals[t*e:(t+1)*e], moeTestTopK) {
				r.Map[t*e+j], masked[t*e+j] = true, 0
				r.TokensPerExpert[j]++
			}
		}
		r.Probs = tensor.Softmax(logits, tensor.SoftmaxOptions{Mask: tensor.FromSlice(x.Device(), masked, logits.Shape()...)})
		return r
	}
}

// refActivation is the activation of pre-activation v at hidden unit i: GeLU (tanh),
// ReLU, or SwiGLU silu(g[i]+gb)·v.
func refActivation(act Activation, v float64, g []float64, i int, gb float64) float64 {
	switch act {
	case ReLU:
		return math.Max(v, 0)
	case SwiGLU:
		s := g[i] + gb
		return s / (1 + math.Exp(-s)) * v
	}
	return 0.5 * v * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(v+0.044715*v*v*v)))
}

func TestMoEMatchesReference(t *testing.T) {
	for _, tc := range []struct {
		name    string
		act     Activation
		bias    bool
		grouped bool
		shared  MoEConfig
	}{
		{"gelu-bias", GeLU, true, false, MoEConfig{}},
		{"gelu-bias-grouped", GeLU, true, true, MoEConfig{}},
		{"swiglu-bias", SwiGLU, true, true, MoEConfig{}},
		{"relu-bias", ReLU, true, false, MoEConfig{}},
		{"swiglu-shared-gate", SwiGLU, false, false, MoEConfig{SharedExpertFFNHidden: 10, SharedExpertGate: true}},
		{"gelu-shared", GeLU, false, true, MoEConfig{SharedExpertFFNHidden: 10}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mc := tc.shared
			mc.GroupedGEMM = tc.grouped
			cfg := moeTestConfig(tc.act, tc.bias, mc)
			b := &Builder{Dev: tensor.NewCPU(), DType: tensor.F64, RNG: tensor.NewRNG(11), TP: parallel.Self()}
			m := NewMoE(b, "layers.0.mlp", cfg)
			m.route = fp64Route(m)
			setBiases(m)
			const bsz, seq = 2, 5
			xv := seqValues(bsz*seq*8, 3)
			x := tensor.FromSlice(b.Dev, xv, bsz, seq, 8)
			y := m.Forward(Eval(context.Background()), x)
			require.Equal(t, tensor.Shape{bsz, seq, 8}, y.Shape())
			require.InDeltaSlice(t, moeReference(m, xv, tc.act), tensor.ToSlice[float64](y), 1e-12)
		})
	}
}

// TestMoEGradientsMatchFiniteDifferences checks the gradients of Σ gy·MoE(x) for x and
// every parameter against central differences (every fifth element).
func TestMoEGradientsMatchFiniteDifferences(t *testing.T) {
	for _, tc := range []struct {
		name string
		act  Activation
		mc   MoEConfig
	}{
		{"gelu-bias-allgather", GeLU, MoEConfig{}},
		{"swiglu-shared-gate-alltoall-grouped", SwiGLU, MoEConfig{Dispatcher: "alltoall", GroupedGEMM: true, SharedExpertFFNHidden: 10, SharedExpertGate: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &Builder{Dev: tensor.NewCPU(), DType: tensor.F64, RNG: tensor.NewRNG(5), TP: parallel.Self()}
			m := NewMoE(b, "layers.0.mlp", moeTestConfig(tc.act, true, tc.mc))
			m.route = fp64Route(m)
			setBiases(m)
			const bsz, seq, c = 2, 3, 8
			x := tensor.FromSlice(b.Dev, seqValues(bsz*seq*c, 4), bsz, seq, c)
			x.SetRequiresGrad(true)
			gy := tensor.FromSlice(b.Dev, seqValues(bsz*seq*c, 9), bsz, seq, c)
			loss := func() float64 {
				var l float64
				b.Dev.NoGrad(func() { l = tensor.Sum(tensor.Mul(m.Forward(Eval(context.Background()), x), gy)).Item() })
				return l
			}
			m.Forward(Eval(context.Background()), x).BackwardWithGrad(gy)
			ts := map[string]*tensor.Tensor{"x": x}
			for _, p := range m.Params() {
				ts[p.Name] = p.Tensor
			}
			const h = 1e-6
			for name, v := range ts {
				require.NotNil(t, v.Grad(), name)
				grad := tensor.ToSlice[float64](v.Grad())
				for i := 0; i < v.Numel(); i += 5 {
					orig := tensor.ToSlice[float64](v)
					set := func(d float64) {
						w := append([]float64(nil), orig...)
						w[i] += d
						v.CopyFrom(tensor.FromSlice(v.Device(), w, v.Shape()...))
					}
					set(h)
					up := loss()
					set(-h)
					down := loss()
					set(0)
					// central differences in fp64: truncation and rounding well below 1e-6
					require.InDelta(t, (up-down)/(2*h), grad[i], 1e-6, "%s[%d]", name, i)
				}
			}
		})
	}
}

// TestMoEGroupedGEMMMatchesSequential checks that the grouped expert products give the
// per-expert products' (Megatron's SequentialMLP) outputs and gradients bit for bit, in
// fp32 (the SIMD kernels).
func TestMoEGroupedGEMMMatchesSequential(t *testing.T) {
	const bsz, seq, c = 3, 7, 8
	run := func(grouped bool) map[string][]float32 {
		b := &Builder{Dev: tensor.NewCPU(), DType: tensor.F32, RNG: tensor.NewRNG(3), TP: parallel.Self()}
		m := NewMoE(b, "layers.0.mlp", moeTestConfig(SwiGLU, true, MoEConfig{GroupedGEMM: grouped}))
		setBiases(m)
		x := tensor.FromSlice(b.Dev, seqValues(bsz*seq*c, 6), bsz, seq, c).Cast(tensor.F32)
		x.SetRequiresGrad(true)
		y := m.Forward(Eval(context.Background()), x)
		y.BackwardWithGrad(tensor.FromSlice(b.Dev, seqValues(bsz*seq*c, 8), bsz, seq, c).Cast(tensor.F32))
		out := map[string][]float32{"y": tensor.ToSlice[float32](y), "dx": tensor.ToSlice[float32](x.Grad())}
		for _, p := range m.Params() {
			out[p.Name] = tensor.ToSlice[float32](p.Grad())
		}
		return out
	}
	require.Equal(t, run(false), run(true))
}
