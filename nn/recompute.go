package nn

import (
	"fmt"

	"megago/tensor"
)

// Recompute selects activation recomputation (Megatron's --recompute-granularity): which
// activations a layer drops after its forward pass and recomputes during backward, trading
// compute for memory. It is chosen when a model is built (Builder.Recompute); the
// parameters, the outputs and the gradients are the same, bit for bit, whatever the
// choice, because the recomputation replays the same arithmetic and the same dropout
// masks (drawn from the layout-independent generator with the same keys).
type Recompute uint8

// Recomputation granularities.
const (
	// RecomputeNone keeps every activation for backward.
	RecomputeNone Recompute = iota
	// RecomputeSelective recomputes the attention core of every attention layer — the
	// scores q·kᵀ, the masked softmax, attention dropout and probs·v — keeping only q, k
	// and v ([B, NH/tp, T, HS] each) instead of the [B, NH/tp, T, T] scores and
	// probabilities (Megatron's selective recomputation: the activations that grow with
	// T² and cost few FLOPs to recompute).
	RecomputeSelective
	// RecomputeFull keeps only each transformer layer's input [B, T, C] ([B, T/tp, C]
	// under sequence parallelism) and reruns the whole layer, its TP collectives included,
	// during backward (Megatron's full recomputation with the uniform method and one layer
	// per chunk).
	RecomputeFull
)

func (r Recompute) String() string {
	switch r {
	case RecomputeNone:
		return "none"
	case RecomputeSelective:
		return "selective"
	case RecomputeFull:
		return "full"
	}
	return fmt.Sprintf("Recompute(%d)", uint8(r))
}

// layerFunc runs one transformer layer of a Block.
type layerFunc func(l *TransformerLayer, p *Pass, x *tensor.Tensor, in LayerInput) *tensor.Tensor

// layerRunner returns how a Block built with r runs its layers.
func layerRunner(r Recompute) layerFunc {
	switch r {
	case RecomputeNone, RecomputeSelective:
		return (*TransformerLayer).Forward
	case RecomputeFull:
		return recomputedLayer
	}
	panic(fmt.Sprintf("nn: unknown recomputation %v", r))
}

// recomputedLayer runs l under tensor.Checkpoint: only x (and the tensors of in, which
// may require grad, like T5's position bias or the encoder output) are kept; the layer's
// activations are recomputed in backward. With a KV cache (generation, no backward) it
// runs l directly, since recomputation would append to the cache twice. The
// recomputation runs with a replaying Pass, so that statistics (an MoE block's) are
// recorded once.
func recomputedLayer(l *TransformerLayer, p *Pass, x *tensor.Tensor, in LayerInput) *tensor.Tensor {
	if in.Cache != nil || in.CrossKV != nil {
		return l.Forward(p, x, in)
	}
	ins, rebuild := layerInputs(x, in)
	run := p
	return tensor.Checkpoint(func(t []*tensor.Tensor) []*tensor.Tensor {
		y := l.Forward(run, t[0], rebuild(t))
		run = p.replay() // later runs are recomputations
		return []*tensor.Tensor{y}
	}, ins...)[0]
}

// layerInputs lists x and the tensors of in as checkpoint inputs, and returns how to
// rebuild in from the checkpoint's stand-ins for them.
func layerInputs(x *tensor.Tensor, in LayerInput) ([]*tensor.Tensor, func([]*tensor.Tensor) LayerInput) {
	fields := func(li *LayerInput) []**tensor.Tensor {
		return []**tensor.Tensor{&li.Memory, &li.Self.Masked, &li.Self.Bias, &li.Cross.Masked, &li.Cross.Bias}
	}
	ins := []*tensor.Tensor{x}
	for _, f := range fields(&in) {
		if *f != nil {
			ins = append(ins, *f)
		}
	}
	return ins, func(t []*tensor.Tensor) LayerInput {
		li, k := in, 1
		for _, f := range fields(&li) {
			if *f != nil {
				*f, k = t[k], k+1
			}
		}
		return li
	}
}

// recomputed returns core under tensor.Checkpoint: q, k, v and the mask and bias are
// kept, everything core computes from them (the scores and probabilities of the unfused
// core; the fused core's output and log-sum-exp) recomputed in backward.
func recomputed(core attendFunc) attendFunc {
	return func(p *Pass, q, k, v *tensor.Tensor, m AttentionMask, a attnSpec) *tensor.Tensor {
		ins := []*tensor.Tensor{q, k, v}
		if m.Masked != nil {
			ins = append(ins, m.Masked)
		}
		if m.Bias != nil {
			ins = append(ins, m.Bias)
		}
		return tensor.Checkpoint(func(t []*tensor.Tensor) []*tensor.Tensor {
			mm, i := m, 3
			if m.Masked != nil {
				mm.Masked, i = t[i], i+1
			}
			if m.Bias != nil {
				mm.Bias = t[i]
			}
			return []*tensor.Tensor{core(p, t[0], t[1], t[2], mm, a)}
		}, ins...)[0]
	}
}
