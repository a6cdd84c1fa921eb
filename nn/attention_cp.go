package nn

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"megago/parallel"
	"megago/tensor"
)

// Context-parallel attention. Under CP a rank holds the 2 chunks of T/(2·cp) positions
// CPPositions gives it (chunks r and 2·cp−1−r of the sequence) and attends its queries to
// the keys and values of every rank. How the keys and values travel is the layer's
// CPCommType, chosen when the layer is built: "p2p" (cpP2P, a ring), "all_gather"
// (cpAllGather) or "a2a"/"a2a+p2p" (cpA2A). Every variant computes attention block by
// block at chunk granularity: a query chunk sees a key chunk wholly (an earlier chunk, or
// any chunk without a causal mask), causally (its own chunk) or not at all (a later chunk,
// skipped), and each block's dropout mask is drawn at the block's global query and key
// offsets in the probabilities of the whole sequence, so masks equal CP=1's.

// cpCommTypes are the accepted CPCommType values, Megatron's --cp-comm-type spellings.
var cpCommTypes = []string{"p2p", "all_gather", "allgather", "a2a", "a2a+p2p"}

// cpCommTypeOf returns layer i's comm type of c.CPCommType (one value for every layer, or
// one per layer), "p2p" when empty.
func (c TransformerConfig) cpCommTypeOf(i int) string {
	kinds := strings.Split(c.CPCommType, ",")
	k := kinds[0]
	if len(kinds) > 1 && i < len(kinds) {
		k = kinds[i]
	}
	if k = strings.TrimSpace(k); k == "" {
		return "p2p"
	}
	return k
}

// validateCP returns what is wrong with c's context-parallel fields (after Defaults).
func (c TransformerConfig) validateCP() []string {
	var errs []string
	if c.CP < 1 {
		errs = append(errs, fmt.Sprintf("CP = %d must be ≥ 1", c.CP))
	}
	if c.CPCommType != "" {
		kinds := strings.Split(c.CPCommType, ",")
		if len(kinds) > 1 && len(kinds) != c.NumLayers {
			errs = append(errs, fmt.Sprintf("CPCommType %q has %d values for %d layers (want one, or one per layer)", c.CPCommType, len(kinds), c.NumLayers))
		}
		for _, k := range kinds {
			if k = strings.TrimSpace(k); k != "" && !slices.Contains(cpCommTypes, k) {
				errs = append(errs, fmt.Sprintf("CPCommType %q is not one of %s", k, strings.Join(cpCommTypes, ", ")))
			}
		}
	}
	if c.CPHierarchy != "" {
		prod := 1
		for _, s := range strings.Split(c.CPHierarchy, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || n < 1 {
				errs = append(errs, fmt.Sprintf("CPHierarchy %q: want comma-separated sizes ≥ 1", c.CPHierarchy))
				return errs
			}
			prod *= n
		}
		if prod != c.CP {
			errs = append(errs, fmt.Sprintf("CPHierarchy %q multiplies to %d, not CP = %d", c.CPHierarchy, prod, c.CP))
		}
	}
	return errs
}

// cpAttentionOf returns the context-parallel core of comm type kind over b.CP; for
// "a2a+p2p" it splits b.CP into cfg.CPHierarchy's a2a and p2p groups (once per Builder:
// every CP rank builds the same layers in the same order). It panics if kind is not a
// CPCommType value or the split fails.
func cpAttentionOf(b *Builder, cfg TransformerConfig, kind string) cpAttention {
	switch kind {
	case "p2p":
		return cpP2P
	case "all_gather", "allgather":
		return cpAllGather
	case "a2a":
		return cpA2A
	case "a2a+p2p":
		return b.cpHierarchy(cfg).a2aP2P
	}
	panic(fmt.Sprintf("nn: context-parallel comm type %q is not one of %s", kind, strings.Join(cpCommTypes, ", ")))
}

// cpCore adapts the context-parallel core f over the group cp to an attendFunc: it takes
// the causal mask from m (which must have nothing else: padding, bias and documents'
// segments are refused under CP; positions only served RoPE) and the scale and dropout
// from a. The queries are the rank's CPPositions.
func cpCore(cp parallel.Comm, f cpAttention) attendFunc {
	return func(p *Pass, q, k, v *tensor.Tensor, m AttentionMask, a attnSpec) *tensor.Tensor {
		if m.Masked != nil || m.Bias != nil || m.Segments != nil {
			panic("nn: context-parallel attention: padding masks, attention bias and documents' segments (Documents.Segments) are not supported under CP")
		}
		tq := q.Dim(2)
		t := tq * cp.Size()
		if k.Dim(2) != tq {
			panic(fmt.Sprintf("nn: context-parallel attention: %d keys for %d queries (KV caches are not supported under CP)", k.Dim(2), tq))
		}
		o := cpAttnOptions{Causal: m.Causal, Scale: a.scale, Positions: CPPositions(t, cp.Size(), cp.Rank()), Key: a.key}
		if p.Train && a.dropout > 0 {
			b, nh := q.Dim(0), q.Dim(1) // [B, NH/tp, T/cp, HS]
			o.Dropout = a.dropout
			o.Full = tensor.Shape{b + p.SampleOffset, nh * a.tp.Size(), t, t}
			o.Start = []int{p.SampleOffset, a.tp.Rank() * nh, 0, 0}
		}
		return f(p, cp, q, k, v, o) // [B, T/cp, NH·HS/tp]
	}
}

// cpLocalMask returns the SelfAttention.local of a layer under context parallelism over
// cp: the mask with the global positions of the rank's t queries (CPPositions(t·cp, cp,
// rank)) unless it has positions. It panics if t is odd (the sequence is not a multiple
// of 2·cp).
func cpLocalMask(cp parallel.Comm) func(m AttentionMask, t int) AttentionMask {
	return func(m AttentionMask, t int) AttentionMask {
		if t%2 != 0 {
			panic(fmt.Sprintf("nn: context-parallel attention: %d positions per rank: the sequence must be a multiple of 2·cp = %d", t, 2*cp.Size()))
		}
		if m.Positions == nil && m.PositionIDs == nil {
			m.Positions = CPPositions(t*cp.Size(), cp.Size(), cp.Rank())
		}
		return m
	}
}

// cpChunkVisibility says how query chunk qc sees key chunk kc (global chunk indices).
type cpChunkVisibility uint8

const (
	cpInvisible cpChunkVisibility = iota // a later chunk under a causal mask
	cpDiagonal                           // the same chunk under a causal mask
	cpVisible                            // wholly visible
)

func cpVisibility(causal bool, qc, kc int) cpChunkVisibility {
	switch {
	case !causal || kc < qc:
		return cpVisible
	case kc == qc:
		return cpDiagonal
	}
	return cpInvisible
}

// cpChunks returns the global chunk indices, of 2·cp, of rank r's two chunks.
func cpChunks(cp, r int) [2]int { return [2]int{r, 2*cp - 1 - r} }

// cpAttendBlock attends queries q [B, NH/tp, Tq, HS] starting at global position qs to keys
// and values k, v [B, G/tp, Tk, HS] starting at ks, with the causal rule of tensor.Attention
// when causal, and returns out [B, NH/tp, Tq, HS] and its log-sum-exp [B, NH/tp, Tq].
func cpAttendBlock(p *Pass, q, k, v *tensor.Tensor, o cpAttnOptions, qs, ks int, causal bool) (out, lse *tensor.Tensor) {
	return tensor.Attention(q, k, v, cpBlockOptions(p, o, qs, ks, causal))
}

// cpBlockOptions returns the tensor.AttentionOptions of cpAttendBlock's block.
func cpBlockOptions(p *Pass, o cpAttnOptions, qs, ks int, causal bool) tensor.AttentionOptions {
	ao := tensor.AttentionOptions{Scale: o.Scale, Causal: causal}
	if o.Dropout > 0 {
		ao.Dropout, ao.RNG, ao.DropoutFull = o.Dropout, p.RNG.Named(o.Key), o.Full
		ao.DropoutStart = []int{o.Start[0], o.Start[1], o.Start[2] + qs, o.Start[3] + ks}
	}
	return ao
}

// cpAllGather is the "all_gather" core: every rank's keys and values are gathered once
// (backward: reduce-scatter of their gradients), then each query chunk attends, in one
// call, to the key chunks before it and its own (causally), or to all of them.
func cpAllGather(p *Pass, cp parallel.Comm, q, k, v *tensor.Tensor, o cpAttnOptions) *tensor.Tensor {
	b, n := k.Dim(0), k.Dim(2)/2
	// All-gather forward, reduce-scatter (sum) backward, into sequence order.
	kv := parallel.GatherFromCP(p.Ctx, cp, tensor.Concat(0, k, v)) // [2B, G/tp, T, HS]
	qs := tensor.Chunk(q, 2, 2)                                    // 2 × [B, NH/tp, n, HS]
	outs := make([]*tensor.Tensor, 2)
	for a, qc := range cpChunks(cp.Size(), cp.Rank()) {
		keys := kv.Dim(2)
		if o.Causal {
			// Keys 0..the chunk's end in global order: the queries are the last n of
			// them, which is tensor.Attention's causal rule.
			keys = (qc + 1) * n
		}
		ks, vs := kv.Narrow(0, 0, b).Narrow(2, 0, keys), kv.Narrow(0, b, b).Narrow(2, 0, keys)
		outs[a], _ = cpAttendBlock(p, qs[a], ks, vs, o, qc*n, 0, o.Causal)
	}
	return mergeHeads(tensor.Concat(2, outs...)) // [B, NH/tp, T/cp, HS] → [B, T/cp, NH·HS/tp]
}

// cpHierarchy returns the a2a and p2p groups of b.CP for cfg.CPHierarchy, split on first
// use. It panics if the hierarchy is not two sizes multiplying to the CP size or the
// split fails.
func (b *Builder) cpHierarchy(cfg TransformerConfig) *cpHierarchy {
	if b.cpGroups != nil {
		return b.cpGroups
	}
	var sizes []int
	for _, f := range strings.Split(cfg.CPHierarchy, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			panic(fmt.Sprintf("nn: a2a+p2p: CPHierarchy %q: want two comma-separated sizes", cfg.CPHierarchy))
		}
		sizes = append(sizes, n)
	}
	h, err := newCPHierarchy(context.Background(), b.CP, sizes)
	if err != nil {
		panic(err.Error())
	}
	b.cpGroups = h
	return h
}
