package nn

import "megago/tensor"

// LayerNorm is torch.nn.LayerNorm over the last dim, or RMSNorm (no mean, no bias) when
// built with the RMSNormKind. Its parameters are replicated over TP; under sequence
// parallelism they are marked SequenceParallel (their gradients must be all-reduced).
type LayerNorm struct {
	Weight *Param // [C]
	Bias   *Param // [C], nil for RMSNorm
	Eps    float64
	// Kind is the norm NewNorm built, which chose the function Forward applies.
	Kind Norm

	// add normalizes x + residual, returning the norm and the sum: layerOps.addLayerNorm
	// or addRMSNorm, fused or not as the Builder chose.
	add func(n *LayerNorm, x, residual *tensor.Tensor) (y, sum *tensor.Tensor)
}

// NewNorm creates name.weight (ones) and, for LayerNorm, name.bias (zeros).
func NewNorm(b *Builder, name string, kind Norm, hidden int, eps float64) *LayerNorm {
	ops := b.ops()
	n := &LayerNorm{Eps: eps, Kind: kind, add: func(n *LayerNorm, x, r *tensor.Tensor) (*tensor.Tensor, *tensor.Tensor) {
		return ops.addLayerNorm(x, r, n.Weight.Tensor, n.Bias.Tensor, n.Eps)
	}}
	if kind == RMSNormKind {
		n.add = func(n *LayerNorm, x, r *tensor.Tensor) (*tensor.Tensor, *tensor.Tensor) {
			return ops.addRMSNorm(x, r, n.Weight.Tensor, n.Eps)
		}
	}
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
	y, _ := n.add(n, x, nil)
	return y
}

// ForwardAdd normalizes x + residual [..., C] (both [..., C]) and returns the norm and
// the sum, in one pass over memory when the Builder chose the fused ops: the residual
// add of a post-LN layer and the norm after it.
func (n *LayerNorm) ForwardAdd(x, residual *tensor.Tensor) (y, sum *tensor.Tensor) {
	return n.add(n, x, residual)
}

// optionalNorm returns n.Forward, or the identity when n is nil (a norm the
// configuration leaves out, as BERT's final norm under post-LN).
func optionalNorm(n *LayerNorm) func(*tensor.Tensor) *tensor.Tensor {
	if n == nil {
		return func(x *tensor.Tensor) *tensor.Tensor { return x }
	}
	return n.Forward
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
