package nn

import (
	"fmt"

	"megago/parallel"
	"megago/tensor"
)

// MLP is the transformer's feed-forward block: fc1 (column parallel) → activation → fc2
// (row parallel). With SwiGLU, fc1 is two column-parallel projections, gate and up, and
// the activation is silu(gate)·up.
type MLP struct {
	FC1  *ColumnParallelLinear // [F/tp, C]; the up projection with SwiGLU
	Gate *ColumnParallelLinear // [F/tp, C]; SwiGLU only
	FC2  *RowParallelLinear    // [C, F/tp]

	// Dropout, in training, drops out the activation [B, T, F/tp] before fc2, as T5's
	// DenseReluDense does; 0 (the default) means none.
	Dropout float64

	name string
	tp   parallel.Comm
	// act applies the activation to h = fc1(x) [B, T, F/tp]: a plain activation, or
	// (*MLP).swiGLU.
	act func(m *MLP, p *Pass, x, h *tensor.Tensor) *tensor.Tensor
}

// NewMLP creates name.fc1, name.gate (SwiGLU) and name.fc2. It panics if
// cfg.Activation is not one of the Activations.
func NewMLP(b *Builder, name string, cfg TransformerConfig) *MLP {
	cfg = cfg.Defaults()
	lo := LinearOptions{Bias: cfg.Bias, Init: Normal(cfg.InitStd)}
	m := &MLP{name: name, tp: b.TP}
	if cfg.Activation == SwiGLU {
		m.Gate = NewColumnParallelLinear(b, name+".gate", cfg.Hidden, cfg.FFNHidden, lo)
		m.act = (*MLP).swiGLU
	} else {
		f := activation(cfg.Activation)
		m.act = func(_ *MLP, _ *Pass, _, h *tensor.Tensor) *tensor.Tensor { return f(h) }
	}
	m.FC1 = NewColumnParallelLinear(b, name+".fc1", cfg.Hidden, cfg.FFNHidden, lo)
	m.FC2 = NewRowParallelLinear(b, name+".fc2", cfg.FFNHidden, cfg.Hidden, LinearOptions{Bias: cfg.Bias, Init: Normal(cfg.OutputInitStd())})
	return m
}

// Params returns the projections' parameters.
func (m *MLP) Params() []*Param { return collect(m.Gate, m.FC1, m.FC2) }

// Forward maps x [B, T, C] ([B, T/tp, C] under sequence parallelism) to the same shape.
func (m *MLP) Forward(p *Pass, x *tensor.Tensor) *tensor.Tensor {
	h := m.FC1.Forward(p, x) // [B, T, F/tp]
	h = m.act(m, p, x, h)
	s := h.Shape()
	full := s.Clone()
	full[2] *= m.tp.Size()
	// With Dropout 0 (the default) dropout returns h as it is.
	h = dropout(p, h, m.Dropout, m.name+".act.dropout", full, []int{0, 0, m.tp.Rank() * s[2]})
	return m.FC2.Forward(p, h) // [B, T, C]
}

// swiGLU is the SwiGLU activation silu(gate(x))·h of h = up(x).
func (m *MLP) swiGLU(p *Pass, x, h *tensor.Tensor) *tensor.Tensor {
	return tensor.Mul(tensor.SiLU(m.Gate.Forward(p, x)), h)
}

// activation returns the function of a plain (not gated) activation. It panics for
// SwiGLU or an unknown activation.
func activation(a Activation) func(*tensor.Tensor) *tensor.Tensor {
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
