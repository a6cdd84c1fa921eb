package nn

import (
	"megago/parallel"
	"megago/tensor"
)

// AttentionMask describes what each query may attend to.
type AttentionMask struct {
	// Causal hides future keys (query i sees keys j ≤ i + Tk − Tq).
	Causal bool
	// Masked, if not nil, broadcasts to the scores [B, NH/tp, Tq, Tk] and is non-zero
	// where attention is not allowed (padding: [B, 1, 1, Tk]); see PaddingMask.
	Masked *tensor.Tensor
	// Bias, if not nil, is added to the scores (T5's relative position bias for this
	// rank's heads, [1, NH/tp, Tq, Tk]).
	Bias *tensor.Tensor
	// Positions are the positions of the queries, for RoPE (nil: 0..Tq−1, or following a
	// KV cache's past).
	Positions []int
	// PositionIDs, if not nil, are the positions of each sample's queries [B][Tq], for
	// RoPE, in place of Positions (documents packed into a sequence: Documents).
	PositionIDs [][]int
	// Segments, if not nil, are the keys' documents [B, Tk] (I32): a query sees only the
	// keys of its own document (tensor.AttentionOptions.Segments; the queries are the
	// last Tq keys).
	Segments *tensor.Tensor
}

// PaddingMask turns a Hugging Face attention mask [B, Tk] (1 = attend, 0 = padding) into
// AttentionMask.Masked form [B, 1, 1, Tk].
func PaddingMask(attend *tensor.Tensor) *tensor.Tensor {
	b, tk := attend.Dim(0), attend.Dim(1)
	m := tensor.ToSlice[float64](attend)
	out := make([]float32, len(m))
	for i, v := range m {
		if v == 0 {
			out[i] = 1
		}
	}
	return tensor.FromSlice(attend.Device(), out, b, 1, 1, tk)
}

// KVCache holds one attention layer's keys and values of past tokens during generation,
// [B, G/tp, Tpast, HS] each, kept outside the step's scope.
type KVCache struct {
	K, V *tensor.Tensor
}

// Len returns the number of cached positions.
func (c *KVCache) Len() int {
	if c == nil || c.K == nil {
		return 0
	}
	return c.K.Dim(2)
}

// SelfAttention is multi-head or grouped-query self-attention with a fused QKV
// projection (column parallel) and an output projection (row parallel). The fused weight
// is laid out per query group, as Megatron does: for each of the G groups, its NH/G query
// heads, then its key head, then its value head, so a TP split takes whole groups (and
// whole heads) — rank r holds groups [r·G/tp, (r+1)·G/tp).
type SelfAttention struct {
	QKV  *ColumnParallelLinear // [G·(NH/G+2)·HS/tp, C]
	Proj *RowParallelLinear    // [C, NH·HS/tp]
	// QNorm and KNorm normalize each query and key head over HS (weights [HS]), with
	// QKNorm; else nil.
	QNorm, KNorm *LayerNorm

	cfg  TransformerConfig
	tp   parallel.Comm
	core attendFunc // attend, or recomputed in backward (Builder.Recompute)
	spec attnSpec
	rope ropeFunc // rotary embeddings with RoPE, else none
	// split adds the projection's bias and cuts it into heads (layerOps.splitHeads).
	split func(qkv, bias *tensor.Tensor, groups, hs int) (q, k, v *tensor.Tensor)
	// local gives a mask its queries' global positions: m itself, or under context
	// parallelism (Builder.CP) CPPositions of the rank's T/cp queries (cpLocalMask).
	local func(m AttentionMask, t int) AttentionMask
}

// NewSelfAttention creates name.qkv and name.proj for cfg (after Defaults).
func NewSelfAttention(b *Builder, name string, cfg TransformerConfig) *SelfAttention {
	cfg = cfg.Defaults()
	qkvOut := cfg.KVHeads * (cfg.Heads/cfg.KVHeads + 2) * cfg.HeadSize
	a := &SelfAttention{
		// splitHeads adds the QKV bias (SkipBiasAdd; Forward, as decodeDirect calls it, adds it).
		QKV: NewColumnParallelLinear(b, name+".qkv", cfg.Hidden, qkvOut,
			LinearOptions{Bias: cfg.Bias || cfg.QKVBias, Init: Normal(cfg.InitStd), SkipBiasAdd: true}),
		Proj: NewRowParallelLinear(b, name+".proj", cfg.Heads*cfg.HeadSize, cfg.Hidden, outputProjection(cfg)),
		cfg:  cfg, tp: b.TP, core: attentionCore(b), spec: newAttnSpec(b, name, cfg), rope: ropeFor(cfg, b.ops()),
		split: b.ops().splitHeads, local: func(m AttentionMask, _ int) AttentionMask { return m },
	}
	if b.CP != nil && b.CP.Size() > 1 {
		a.core, a.local = cpCore(b.CP, cpAttentionOf(b, cfg, cfg.cpCommTypeOf(0))), cpLocalMask(b.CP)
	}
	if cfg.QKNorm {
		a.QNorm, a.KNorm = newHeadNorm(b, name+".q_norm", cfg), newHeadNorm(b, name+".k_norm", cfg)
	}
	return a
}

// newHeadNorm returns the norm of one head's HS channels that QKNorm applies to queries
// or keys. Its weights are replicated over TP but each rank's gradient covers only its own
// heads, so they are marked SequenceParallel: their gradients are summed over TP
// (ReduceSequenceParallelGrads), with or without sequence parallelism.
func newHeadNorm(b *Builder, name string, cfg TransformerConfig) *LayerNorm {
	n := NewNorm(b, name, cfg.Norm, cfg.HeadSize, cfg.NormEps)
	for _, p := range n.Params() {
		p.SequenceParallel = b.TP.Size() > 1
	}
	return n
}

// Params returns the projections' parameters, then the query and key norms'.
func (a *SelfAttention) Params() []*Param {
	ps := collect(a.QKV, a.Proj)
	if a.QNorm != nil {
		ps = append(append(ps, a.QNorm.Params()...), a.KNorm.Params()...)
	}
	return ps
}

// Forward attends x [B, T, C] ([B, T/tp, C] under sequence parallelism) to itself and
// returns the same shape. cache, if not nil, holds past keys and values: they are attended
// to and the new ones appended. Under context parallelism (built with Builder.CP of size
// cp > 1) x holds the rank's positions CPPositions(T, cp, rank), [B, T/cp, C]
// ([B, T/(cp·tp), C] with sequence parallelism), and its queries attend to the keys of
// the whole sequence; caches, padding masks, bias and documents are not supported then.
func (a *SelfAttention) Forward(p *Pass, x *tensor.Tensor, m AttentionMask, cache *KVCache) *tensor.Tensor {
	return sumBias(a.forward(p, x, m, cache))
}

// forward is Forward returning the output projection's bias [C] (nil without biases)
// beside the output, not yet added, for the layer to add with its dropout and residual.
func (a *SelfAttention) forward(p *Pass, x *tensor.Tensor, m AttentionMask, cache *KVCache) (y, bias *tensor.Tensor) {
	q, k, v := a.project(p, x, m, cache.Len())
	if cache != nil {
		k, v = cache.append(k, v)
	}
	out := a.core(p, q, k, v, a.local(m, q.Dim(2)), a.spec) // [B, T, NH·HS/tp]
	return a.Proj.ForwardWithBias(p, out)
}

// project returns this rank's queries q [B, NH/tp, T, HS] and key and value groups k, v
// [B, G/tp, T, HS] of x [B, T, C], normalized (QKNorm) and rotated (RoPE) by m's
// positions, or past..past+T−1 when it has none.
func (a *SelfAttention) project(p *Pass, x *tensor.Tensor, m AttentionMask, past int) (q, k, v *tensor.Tensor) {
	c := a.cfg
	y, bias := a.QKV.ForwardWithBias(p, x) // [B, T, G/tp·(NH/G+2)·HS], its bias not yet added
	// The bias add, the permutation to heads and the split into q, k and v in one pass
	// (the fused ops) or as the ops that define it (Builder.Unfused).
	q, k, v = a.split(y, bias, c.KVHeads/a.tp.Size(), c.HeadSize)
	releaseDead(y, q, k, v) // consumed: the split's backward needs only its shape
	t := q.Dim(2)
	if a.QNorm != nil {
		q, k = a.QNorm.Forward(q), a.KNorm.Forward(k) // over HS, before RoPE as in Megatron
	}
	q, k = a.rope(q, k, a.local(m, t), past)
	return q, k, v
}

// append adds new keys and values [B, G/tp, Tnew, HS] to the cache and returns all of them.
func (kv *KVCache) append(k, v *tensor.Tensor) (*tensor.Tensor, *tensor.Tensor) {
	oldK, oldV := kv.K, kv.V
	if oldK != nil {
		k = tensor.Concat(2, oldK, k)
		v = tensor.Concat(2, oldV, v)
	}
	kv.K, kv.V = k.Detach().Clone().Keep(), v.Detach().Clone().Keep()
	if oldK != nil {
		oldK.Release()
		oldV.Release()
	}
	return k, v
}

// CrossAttention attends queries from x (the decoder) to keys and values from another
// sequence (the encoder's output), as in T5's decoder. Its key/value projection is fused
// per head group: for each of the G groups, its key head then its value head.
type CrossAttention struct {
	Q    *ColumnParallelLinear // [NH·HS/tp, C]
	KV   *ColumnParallelLinear // [G·2·HS/tp, C]
	Proj *RowParallelLinear    // [C, NH·HS/tp]

	cfg  TransformerConfig
	tp   parallel.Comm
	core attendFunc
	spec attnSpec
}

// NewCrossAttention creates name.q, name.kv and name.proj.
func NewCrossAttention(b *Builder, name string, cfg TransformerConfig) *CrossAttention {
	cfg = cfg.Defaults()
	lo := LinearOptions{Bias: cfg.Bias, Init: Normal(cfg.InitStd)}
	return &CrossAttention{
		Q:    NewColumnParallelLinear(b, name+".q", cfg.Hidden, cfg.Heads*cfg.HeadSize, lo),
		KV:   NewColumnParallelLinear(b, name+".kv", cfg.Hidden, 2*cfg.KVHeads*cfg.HeadSize, lo),
		Proj: NewRowParallelLinear(b, name+".proj", cfg.Heads*cfg.HeadSize, cfg.Hidden, outputProjection(cfg)),
		cfg:  cfg, tp: b.TP, core: attentionCore(b), spec: newAttnSpec(b, name, cfg),
	}
}

// Params returns the projections' parameters.
func (a *CrossAttention) Params() []*Param { return collect(a.Q, a.KV, a.Proj) }

// Forward attends x [B, Tq, C] to mem [B, Tk, C] (both [B, T/tp, C] under sequence
// parallelism) and returns x's shape. m.Causal should be false.
func (a *CrossAttention) Forward(p *Pass, x, mem *tensor.Tensor, m AttentionMask) *tensor.Tensor {
	k, v := a.MemoryKV(p, mem)
	return a.ForwardKV(p, x, k, v, m)
}

// MemoryKV projects mem [B, Tk, C] to this rank's keys and values, [B, G/tp, Tk, HS]
// each: what Forward attends to, computed once per encoder output during generation.
func (a *CrossAttention) MemoryKV(p *Pass, mem *tensor.Tensor) (k, v *tensor.Tensor) {
	c := a.cfg
	kv := a.KV.Forward(p, mem) // [B, Tk, G/tp·2·HS]
	b, tk, gl := kv.Dim(0), kv.Dim(1), c.KVHeads/a.tp.Size()
	parts := tensor.Split(kv.Reshape(b, tk, gl, 2, c.HeadSize), 3, 1, 1)
	k = parts[0].Reshape(b, tk, gl, c.HeadSize).Permute(0, 2, 1, 3) // [B, G/tp, Tk, HS]
	v = parts[1].Reshape(b, tk, gl, c.HeadSize).Permute(0, 2, 1, 3)
	return k, v
}

// ForwardKV attends x [B, Tq, C] to the keys and values k, v [B, G/tp, Tk, HS] that
// MemoryKV made, and returns x's shape.
func (a *CrossAttention) ForwardKV(p *Pass, x, k, v *tensor.Tensor, m AttentionMask) *tensor.Tensor {
	return sumBias(a.forwardKV(p, x, k, v, m))
}

// forwardKV is ForwardKV returning the output projection's bias as SelfAttention.forward
// does.
func (a *CrossAttention) forwardKV(p *Pass, x, k, v *tensor.Tensor, m AttentionMask) (y, bias *tensor.Tensor) {
	c := a.cfg
	q := a.Q.Forward(p, x) // [B, Tq, NH·HS/tp]
	b, tq := q.Dim(0), q.Dim(1)
	q = q.Reshape(b, tq, q.Dim(2)/c.HeadSize, c.HeadSize).Permute(0, 2, 1, 3) // [B, NH/tp, Tq, HS]
	out := a.core(p, q, k, v, m, a.spec)                                      // [B, Tq, NH·HS/tp]
	return a.Proj.ForwardWithBias(p, out)
}
