package nn

import (
	"fmt"

	"megago/parallel"
	"megago/tensor"
)

// MLP is the transformer's feed-forward block: fc1 (column parallel) → activation → fc2
// (row parallel). With SwiGLU, fc1 is two column-parallel projections, gate and up, and
// the activation is silu(gate)·up. The biases of fc1 (and gate) are added by the
// activation, fused with it unless the Builder chose the unfused ops.
type MLP struct {
	FC1  *ColumnParallelLinear // [F/tp, C]; the up projection with SwiGLU
	Gate *ColumnParallelLinear // [F/tp, C]; SwiGLU only
	FC2  *RowParallelLinear    // [C, F/tp]

	// Dropout, in training, drops out the activation [B, T, F/tp] before fc2, as T5's
	// DenseReluDense does; 0 (the default) means none.
	Dropout float64

	name string
	tp   parallel.Comm
	// act computes the activation of fc1 (and gate) from x [B, T, C]: [B, T, F/tp].
	act func(m *MLP, p *Pass, x *tensor.Tensor) *tensor.Tensor
}

// NewMLP creates name.fc1, name.gate (SwiGLU) and name.fc2. It panics if
// cfg.Activation is not one of the Activations.
func NewMLP(b *Builder, name string, cfg TransformerConfig) *MLP {
	cfg = cfg.Defaults()
	lo := LinearOptions{Bias: cfg.Bias, Init: Normal(cfg.InitStd)}
	m := &MLP{name: name, tp: b.TP, act: activation(cfg.Activation, b.ops())}
	if act := cfg.Activation; act == GeLU || act == GeLUErf || act == SwiGLU {
		lo.SkipBiasAdd = true // the activation adds the bias
	}
	if cfg.Activation == SwiGLU {
		m.Gate = NewColumnParallelLinear(b, name+".gate", cfg.Hidden, cfg.FFNHidden, lo)
	}
	m.FC1 = NewColumnParallelLinear(b, name+".fc1", cfg.Hidden, cfg.FFNHidden, lo)
	m.FC2 = NewRowParallelLinear(b, name+".fc2", cfg.FFNHidden, cfg.Hidden, outputProjection(cfg))
	return m
}

// outputProjection is the options of the row-parallel projection that ends a sub-block
// (attention's proj, the MLP's fc2): scaled init, and the bias returned to be added with
// the layer's dropout and residual.
func outputProjection(cfg TransformerConfig) LinearOptions {
	return LinearOptions{Bias: cfg.Bias, Init: Normal(cfg.OutputInitStd()), SkipBiasAdd: true}
}

// Params returns the projections' parameters.
func (m *MLP) Params() []*Param { return collect(m.Gate, m.FC1, m.FC2) }

// Forward maps x [B, T, C] ([B, T/tp, C] under sequence parallelism) to the same shape.
func (m *MLP) Forward(p *Pass, x *tensor.Tensor) *tensor.Tensor { return sumBias(m.forward(p, x)) }

// forward is Forward returning fc2's bias [C] (nil without biases) beside the output, not
// yet added, for the layer to add with its dropout and residual.
func (m *MLP) forward(p *Pass, x *tensor.Tensor) (y, bias *tensor.Tensor) {
	h := m.act(m, p, x) // [B, T, F/tp]
	s := h.Shape()
	full := s.Clone()
	full[2] *= m.tp.Size()
	// With Dropout 0 (the default) dropout returns h as it is.
	h = dropout(p, h, m.Dropout, m.name+".act.dropout", full, []int{0, 0, m.tp.Rank() * s[2]})
	return m.FC2.ForwardWithBias(p, h) // [B, T, C]
}

// activation returns how an MLP computes activation a of fc1(x) with ops. It panics for an
// unknown activation.
func activation(a Activation, ops layerOps) func(m *MLP, p *Pass, x *tensor.Tensor) *tensor.Tensor {
	switch a {
	case GeLU, GeLUErf:
		form := tensor.OpGeLUTanh
		if a == GeLUErf {
			form = tensor.OpGeLUErf
		}
		return func(m *MLP, p *Pass, x *tensor.Tensor) *tensor.Tensor {
			h, bias := m.FC1.ForwardWithBias(p, x) // [B, T, F/tp], [F/tp]
			return ops.biasGeLU(h, bias, form)
		}
	case ReLU:
		return func(m *MLP, p *Pass, x *tensor.Tensor) *tensor.Tensor { return tensor.ReLU(m.FC1.Forward(p, x)) }
	case SwiGLU:
		return func(m *MLP, p *Pass, x *tensor.Tensor) *tensor.Tensor {
			gate, gb := m.Gate.ForwardWithBias(p, x) // [B, T, F/tp], [F/tp]
			up, ub := m.FC1.ForwardWithBias(p, x)
			return ops.biasSwiGLU(gate, up, gb, ub)
		}
	}
	panic(fmt.Sprintf("nn: unknown activation %d", a))
}

// plainActivation returns the function of a plain (not gated) activation, for a head
// that applies it on its own (BERT's MLM transform). It panics for SwiGLU or an unknown
// activation.
func plainActivation(a Activation) func(*tensor.Tensor) *tensor.Tensor {
	switch a {
	case GeLU:
		return tensor.GeLU
	case GeLUErf:
		return tensor.GeLUErf
	case ReLU:
		return tensor.ReLU
	}
	panic(fmt.Sprintf("nn: activation %d is not a plain activation", a))
}
