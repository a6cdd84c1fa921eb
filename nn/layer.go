package nn

import (
	"fmt"

	"megago/tensor"
)

// TransformerLayer is one transformer layer: self-attention, optionally cross-attention
// (a decoder layer), and an MLP (or a mixture-of-experts block where
// TransformerConfig.MoE says so), each a residual sub-block with hidden dropout. Pre-LN
// (GPT, Llama, T5) normalizes each sub-block's input: x + f(norm(x)); post-LN (BERT)
// normalizes after the residual add: norm(x + f(x)).
type TransformerLayer struct {
	Norm1     *LayerNorm
	Attn      *SelfAttention
	NormCross *LayerNorm      // decoder layers only
	Cross     *CrossAttention // decoder layers only
	Norm2     *LayerNorm
	MLP       *MLP // nil in a mixture-of-experts layer
	MoE       *MoE // mixture-of-experts layers only

	// ffn is the feed-forward sub-block: MLP or MoE.
	ffn feedForward

	name    string
	dropout float64 // hidden dropout after each sub-block
	region  tpRegion
	ops     layerOps
	// residual wraps a sub-block in its norm and residual add: preLN or postLN.
	residual residualFunc
	// cross runs a decoder layer's cross-attention sub-block
	// ((*TransformerLayer).crossBlock), or nothing (noCross).
	cross func(l *TransformerLayer, p *Pass, x *tensor.Tensor, in LayerInput) *tensor.Tensor
}

// NewTransformerLayer creates layer name (e.g. "layers.3"); withCross adds
// cross-attention. The layer gets an MoE block instead of the MLP when cfg.MoE.IsMoELayer
// for the index that ends name.
func NewTransformerLayer(b *Builder, name string, cfg TransformerConfig, withCross bool) *TransformerLayer {
	cfg = cfg.Defaults()
	l := &TransformerLayer{name: name, dropout: cfg.Dropout, region: b.region(), ops: b.ops(), residual: preLN, cross: noCross}
	if cfg.PostLN {
		l.residual = postLN
	}
	l.Norm1 = NewNorm(b, name+".norm1", cfg.Norm, cfg.Hidden, cfg.NormEps)
	l.Attn = NewSelfAttention(b, name+".attn", cfg)
	if withCross {
		l.NormCross = NewNorm(b, name+".norm_cross", cfg.Norm, cfg.Hidden, cfg.NormEps)
		l.Cross = NewCrossAttention(b, name+".cross", cfg)
		l.cross = (*TransformerLayer).crossBlock
	}
	l.Norm2 = NewNorm(b, name+".norm2", cfg.Norm, cfg.Hidden, cfg.NormEps)
	if i := layerIndex(name); cfg.MoE.IsMoELayer(i, cfg.NumLayers) {
		l.MoE = NewMoE(b, name+".mlp", cfg)
		l.ffn = l.MoE
	} else {
		l.MLP = NewMLP(b, name+".mlp", cfg)
		l.ffn = l.MLP
	}
	return l
}

// feedForward is a layer's feed-forward sub-block (*MLP or *MoE): forward maps its
// normalized input [B, T, C] ([B, T/tp, C] under sequence parallelism) to its output
// and the bias not yet added (nil: none).
type feedForward interface {
	Module
	forward(p *Pass, x *tensor.Tensor) (y, bias *tensor.Tensor)
}

// Params returns the layer's parameters.
func (l *TransformerLayer) Params() []*Param {
	var ps []*Param
	ps = append(ps, l.Norm1.Params()...)
	ps = append(ps, l.Attn.Params()...)
	if l.Cross != nil {
		ps = append(ps, l.NormCross.Params()...)
		ps = append(ps, l.Cross.Params()...)
	}
	ps = append(ps, l.Norm2.Params()...)
	return append(ps, l.ffn.Params()...)
}

// LayerInput is what a layer attends with besides its input.
type LayerInput struct {
	Self  AttentionMask
	Cross AttentionMask
	// Memory is the encoder output [B, Tk, C] for cross-attention.
	Memory *tensor.Tensor
	// Cache holds this layer's past keys and values during generation (nil otherwise).
	Cache *KVCache
	// CrossKV, if not nil, holds the cross-attention's keys and values of the encoder
	// output (CrossAttention.MemoryKV), computed once for generation; Memory is then
	// unused.
	CrossKV *KVCache
}

// Forward maps x [B, T, C] ([B, T/tp, C] under sequence parallelism) to the same shape.
func (l *TransformerLayer) Forward(p *Pass, x *tensor.Tensor, in LayerInput) *tensor.Tensor {
	x = l.subBlock(p, x, l.Norm1, "attn", func(h *tensor.Tensor) (*tensor.Tensor, *tensor.Tensor) {
		return l.Attn.forward(p, h, in.Self, in.Cache)
	})
	x = l.cross(l, p, x, in)
	return l.subBlock(p, x, l.Norm2, "mlp", func(h *tensor.Tensor) (*tensor.Tensor, *tensor.Tensor) {
		return l.ffn.forward(p, h)
	})
}

// crossBlock is a decoder layer's cross-attention sub-block. It panics if in has no
// encoder memory.
func (l *TransformerLayer) crossBlock(p *Pass, x *tensor.Tensor, in LayerInput) *tensor.Tensor {
	if in.Memory == nil && in.CrossKV == nil {
		panic(fmt.Sprintf("nn: %s: decoder layer without encoder memory", l.name))
	}
	return l.subBlock(p, x, l.NormCross, "cross", func(h *tensor.Tensor) (*tensor.Tensor, *tensor.Tensor) {
		if in.CrossKV != nil {
			return l.Cross.forwardKV(p, h, in.CrossKV.K, in.CrossKV.V, in.Cross)
		}
		k, v := l.Cross.MemoryKV(p, in.Memory)
		return l.Cross.forwardKV(p, h, k, v, in.Cross)
	})
}

// noCross is the missing cross-attention sub-block of an encoder layer.
func noCross(_ *TransformerLayer, _ *Pass, x *tensor.Tensor, _ LayerInput) *tensor.Tensor { return x }

// subFunc is a sub-block (attention or MLP) of a layer: it maps its normalized input
// [B, T, C] ([B, T/tp, C] under sequence parallelism) to its output without the bias of
// its last (row-parallel) projection, and that bias [C] (nil without biases), which the
// layer adds with the dropout and the residual.
type subFunc func(h *tensor.Tensor) (y, bias *tensor.Tensor)

// subBlock applies one sub-block f with its norm, bias, hidden dropout at site and
// residual add.
func (l *TransformerLayer) subBlock(p *Pass, x *tensor.Tensor, norm *LayerNorm, site string, f subFunc) *tensor.Tensor {
	return l.residual(l, p, x, norm, l.name+"."+site+".dropout", f)
}

// residualFunc adds a sub-block f, its bias and hidden dropout (at site key) included, to
// its input x [B, T, C] ([B, T/tp, C] under sequence parallelism) with the norm where the
// layer puts it.
type residualFunc func(l *TransformerLayer, p *Pass, x *tensor.Tensor, norm *LayerNorm, key string, f subFunc) *tensor.Tensor

// preLN normalizes the sub-block's input: x + dropout(f(norm(x)) + bias) (GPT, Llama,
// T5), the bias, dropout and residual add in one op.
func preLN(l *TransformerLayer, p *Pass, x *tensor.Tensor, norm *LayerNorm, key string, f subFunc) *tensor.Tensor {
	y, bias := f(norm.Forward(x))
	return l.addSubOutput(y, l.region.biasDropoutAdd(p, l.ops, y, bias, x, l.dropout, key))
}

// postLN normalizes after the residual add: norm(x + dropout(f(x) + bias)) (BERT), the
// residual add and the norm in one op.
func postLN(l *TransformerLayer, p *Pass, x *tensor.Tensor, norm *LayerNorm, key string, f subFunc) *tensor.Tensor {
	y, bias := f(x)
	y, _ = norm.ForwardAdd(l.addSubOutput(y, l.region.biasDropoutAdd(p, l.ops, y, bias, nil, l.dropout, key)), x)
	return y
}

// addSubOutput returns out, the result of adding a sub-block's output y (its last
// projection's, made for this layer alone) with its bias, dropout and residual, after
// releasing y when the fused op's backward does not read it.
func (l *TransformerLayer) addSubOutput(y, out *tensor.Tensor) *tensor.Tensor {
	if l.ops.fused {
		releaseDead(y, out)
	}
	return out
}

// Block is a stack of transformer layers [First, First+len(Layers)) of a model's L —
// the whole stack, or one pipeline stage's slice of it. Layer i is named "layers.i" with
// its global index, so parameters keep their names and initial values whatever the
// pipeline split.
type Block struct {
	Layers []*TransformerLayer
	First  int

	run layerFunc // how each layer runs: directly, or recomputed in backward (b.Recompute)
}

// NewBlock creates layers [first, first+n) under prefix ("layers" or "decoder.layers"),
// with b.Recompute's activation recomputation.
func NewBlock(b *Builder, prefix string, cfg TransformerConfig, first, n int, withCross bool) *Block {
	blk := &Block{First: first, run: layerRunner(b.Recompute)}
	for i := first; i < first+n; i++ {
		lc := cfg
		lc.CPCommType = cfg.cpCommTypeOf(i) // this layer's
		blk.Layers = append(blk.Layers, NewTransformerLayer(b, fmt.Sprintf("%s.%d", prefix, i), lc, withCross))
	}
	return blk
}

// Params returns the layers' parameters in order.
func (blk *Block) Params() []*Param {
	var ps []*Param
	for _, l := range blk.Layers {
		ps = append(ps, l.Params()...)
	}
	return ps
}

// Forward runs the layers in order. caches, if not nil, has one KVCache per layer.
func (blk *Block) Forward(p *Pass, x *tensor.Tensor, in LayerInput, caches []*KVCache) *tensor.Tensor {
	for i, l := range blk.Layers {
		li := in
		if caches != nil {
			li.Cache = caches[i]
		}
		beforeForward(l)
		x = blk.run(l, p, x, li)
	}
	return x
}
