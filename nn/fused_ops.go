package nn

import "megago/tensor"

// layerOps are the row-wise operations the layers a Builder makes compute with, chosen
// once by the Builder (Builder.ops): tensor's fused ops, each one pass over memory
// (the default), or with Builder.Unfused the compositions of ordinary ops that define them
// (tensor's *Reference functions), which tests and benchmarks compare the fused layers
// with. The two sets have the same signatures and agree within rounding.
type layerOps struct {
	// biasGeLU is gelu(x + bias) in form OpGeLUTanh or OpGeLUErf.
	biasGeLU func(x, bias *tensor.Tensor, form tensor.UnaryOp) *tensor.Tensor
	// biasSwiGLU is silu(gate + gateBias)·(up + upBias).
	biasSwiGLU func(gate, up, gateBias, upBias *tensor.Tensor) *tensor.Tensor
	// biasDropoutAdd is residual + dropout(x + bias) over a region of a full tensor.
	biasDropoutAdd func(x, bias, residual *tensor.Tensor, p float64, rng tensor.RNG, full tensor.Shape, start []int) *tensor.Tensor
	// addLayerNorm and addRMSNorm normalize sum = x + residual, returning both.
	addLayerNorm func(x, residual, w, b *tensor.Tensor, eps float64) (y, sum *tensor.Tensor)
	addRMSNorm   func(x, residual, w *tensor.Tensor, eps float64) (y, sum *tensor.Tensor)
	// rope rotates x [B, H, T, HS] by the positions of its T tokens.
	rope func(x *tensor.Tensor, positions []int, theta float64) *tensor.Tensor
	// splitHeads cuts a fused QKV projection [B, T, G·(per+2)·HS] plus its bias (or nil)
	// into q [B, G·per, T, HS] and k, v [B, G, T, HS].
	splitHeads func(qkv, bias *tensor.Tensor, groups, hs int) (q, k, v *tensor.Tensor)
	// fused marks tensor's fused ops, whose biasDropoutAdd's backward reads none of its
	// operands (it draws the mask again), so a layer may release its own x once added.
	fused bool
}

var (
	fusedOps = layerOps{
		biasGeLU: tensor.BiasGeLU, biasSwiGLU: tensor.BiasSwiGLU, biasDropoutAdd: tensor.BiasDropoutAdd,
		addLayerNorm: tensor.AddLayerNorm, addRMSNorm: tensor.AddRMSNorm, rope: tensor.RoPE, splitHeads: tensor.SplitHeads, fused: true,
	}
	referenceOps = layerOps{
		biasGeLU: tensor.BiasGeLUReference, biasSwiGLU: tensor.BiasSwiGLUReference,
		biasDropoutAdd: tensor.BiasDropoutAddReference, addLayerNorm: tensor.AddLayerNormReference,
		addRMSNorm: tensor.AddRMSNormReference, rope: tensor.RoPEReference,
		splitHeads: tensor.SplitHeadsReference,
	}
)

// ops returns the row-wise operations of the layers b builds.
func (b *Builder) ops() layerOps {
	if b.Unfused {
		return referenceOps
	}
	return fusedOps
}

// biasDropoutAdd returns residual + dropout(y + bias) for a sub-block's output y
// [B, T, C] (this rank's positions under sequence and context parallelism) and its not
// yet added bias [C]
// (nil: none), with hidden dropout at site key in training: the mask is the one
// tpRegion.dropout draws for y + bias.
func (r tpRegion) biasDropoutAdd(p *Pass, ops layerOps, y, bias, residual *tensor.Tensor, prob float64, key string) *tensor.Tensor {
	if !p.Train {
		prob = 0
	}
	return r.byRuns(y, residual, func(y, residual *tensor.Tensor, full tensor.Shape, start []int) *tensor.Tensor {
		full[0] += p.SampleOffset // samples numbered globally
		start[0] += p.SampleOffset
		return ops.biasDropoutAdd(y, bias, residual, prob, p.RNG.Named(key), full, start)
	})
}
