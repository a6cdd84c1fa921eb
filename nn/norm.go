package nn

import "megago/tensor"

// LayerNorm is torch.nn.LayerNorm over the last dim, or RMSNorm (no mean, no bias) when
// built with the RMSNormKind. Its parameters are replicated over TP; under sequence
// parallelism they are marked SequenceParallel (their gradients must be all-reduced).
type LayerNorm struct {
	Weight *Param // [C]
	Bias   *Param // [C], nil for RMSNorm
	Eps    float64
	Kind   Norm
}

// NewNorm creates name.weight (ones) and, for LayerNorm, name.bias (zeros).
func NewNorm(b *Builder, name string, kind Norm, hidden int, eps float64) *LayerNorm {
	n := &LayerNorm{Eps: eps, Kind: kind}
	n.Weight = newParam(b, name+".weight", tensor.Shape{hidden}, -1, Constant(1))
	n.Weight.SequenceParallel = b.SequenceParallel
	if kind == LayerNormKind {
		n.Bias = newParam(b, name+".bias", tensor.Shape{hidden}, -1, Constant(0))
		n.Bias.SequenceParallel = b.SequenceParallel
	}
	return n
}

// Params returns the weight and bias.
func (n *LayerNorm) Params() []*Param { return params{n.Weight, n.Bias}.Params() }

// Forward normalizes x [..., C].
func (n *LayerNorm) Forward(x *tensor.Tensor) *tensor.Tensor {
	if n.Kind == RMSNormKind {
		return tensor.RMSNorm(x, n.Weight.Tensor, n.Eps)
	}
	return tensor.LayerNorm(x, n.Weight.Tensor, n.Bias.Tensor, n.Eps)
}

// dropout applies dropout with probability prob to x, which holds the region of a full
// tensor that starts at start (global coordinates: sample, position, feature or head), in
// training only. key names the dropout site ("layers.3.attn.dropout"), so masks differ
// between sites and repeat exactly when recomputed.
func dropout(p *Pass, x *tensor.Tensor, prob float64, key string, full tensor.Shape, start []int) *tensor.Tensor {
	if !p.Train || prob == 0 {
		return x
	}
	full = full.Clone()
	start = append([]int(nil), start...)
	full[0] += p.SampleOffset // dim 0 is the micro-batch: samples are numbered globally
	start[0] += p.SampleOffset
	return tensor.DropoutRegion(x, prob, p.RNG.Named(key), full, start)
}

// hiddenDropout drops out a hidden state x [B, T, C] or, under sequence parallelism, its
// slice [B, T/tp, C] of the sequence (tpRank's).
func hiddenDropout(p *Pass, x *tensor.Tensor, prob float64, key string, sp bool, tpRank, tp int) *tensor.Tensor {
	s := x.Shape()
	full, start := s.Clone(), make([]int, 3)
	if sp {
		full[1] = s[1] * tp
		start[1] = tpRank * s[1]
	}
	return dropout(p, x, prob, key, full, start)
}
