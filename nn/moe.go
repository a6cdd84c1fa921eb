package nn

import (
	"fmt"
	"strconv"
	"strings"

	"megago/parallel"
	"megago/tensor"
)

// MoE is a mixture-of-experts block, which replaces a transformer layer's MLP: the
// Router sends each token to its top-k experts, a token dispatcher moves the tokens to
// the EP ranks holding those experts and their outputs back (allgather or alltoall,
// MoEConfig.Dispatcher), and the output is the sum of the chosen experts' outputs
// weighted by the router's probabilities, plus an optional shared expert every token goes
// through, optionally scaled by a sigmoid gate (Qwen2-MoE). Under sequence parallelism
// each TP rank routes and dispatches its own tokens [B, T/tp, C]; under tensor
// parallelism without it (which Megatron-core refuses in training) each TP rank takes
// its 1/tp of the sequence and runs as under sequence parallelism (the router's weight is
// then marked SequenceParallel), and the outputs are all-gathered.
type MoE struct {
	Router  *Router
	Experts *Experts
	// Shared is the shared expert (a dense MLP of hidden SharedExpertFFNHidden, TP-split
	// as any MLP); nil without.
	Shared *MLP
	// SharedGate [1, C] scales the shared expert's output by sigmoid(x·wᵀ); nil without
	// (or without a shared expert).
	SharedGate *Param

	layer   int // index of the layer, for stats (−1: unknown)
	experts int // E
	local   int // E/ep
	groups  ExpertGroups
	// route routes x (Router.Route); tests substitute it to drop tokens.
	route func(p *Pass, x *tensor.Tensor) Routing
	// dispatch computes the weighted sum of the routed experts' outputs (allGatherDispatch
	// or allToAllDispatch).
	dispatch dispatchFunc
	// split gives the dispatcher this TP rank's tokens: all of them (wholeTokens) or,
	// under TP without sequence parallelism, its chunk of the sequence (seqChunk).
	split tokenSplit
	// addShared adds the shared expert: noShared, withShared or withGatedShared.
	addShared sharedFunc
	stats     MoELayerStats
}

// NewMoE creates the MoE block name (e.g. "layers.3.mlp"): name.router,
// name.experts, and with SharedExpertFFNHidden name.shared_expert and, with
// SharedExpertGate, name.shared_expert_gate.weight. It uses b.TP for the shared expert
// and b.Experts (nil groups: one rank) for the experts. It panics if cfg has no experts,
// or an unknown dispatcher.
func NewMoE(b *Builder, name string, cfg TransformerConfig) *MoE {
	cfg = cfg.Defaults()
	mc := cfg.MoE
	g := b.Experts.orSelf()
	m := &MoE{layer: layerIndex(name), experts: mc.NumExperts, local: mc.NumExperts / g.EP.Size(), groups: g,
		split: wholeTokens{}, addShared: noShared}
	rb := b // the router's builder: sequence parallel when the block routes a chunk
	if b.TP.Size() > 1 && !b.SequenceParallel {
		m.split = seqChunk{tp: b.TP}
		sp := *b
		sp.SequenceParallel = true
		rb = &sp
	}
	m.Router = NewRouter(rb, name+".router", cfg)
	m.route = m.Router.Route
	m.Experts = NewExperts(b, name+".experts", cfg)
	switch mc.Dispatcher {
	case "", "allgather":
		m.dispatch = allGatherDispatch
	case "alltoall":
		m.dispatch = allToAllDispatch
	default:
		panic(fmt.Sprintf("nn: MoE %s: unknown dispatcher %q (want allgather or alltoall)", name, mc.Dispatcher))
	}
	if mc.SharedExpertFFNHidden > 0 {
		sc := cfg
		sc.FFNHidden = mc.SharedExpertFFNHidden
		m.Shared = NewMLP(b, name+".shared_expert", sc)
		m.addShared = withShared
		if mc.SharedExpertGate {
			m.addShared = withGatedShared
			m.SharedGate = newParam(b, name+".shared_expert_gate.weight", tensor.Shape{1, cfg.Hidden}, -1, Normal(cfg.InitStd))
			m.SharedGate.SequenceParallel = b.SequenceParallel
		}
	}
	m.stats = MoELayerStats{Layer: m.layer, TokensPerExpert: make([]int64, m.experts)}
	return m
}

// orSelf returns g with nil groups replaced by groups of one rank.
func (g ExpertGroups) orSelf() ExpertGroups {
	for _, c := range []*parallel.Comm{&g.EP, &g.TP, &g.TPEP} {
		if *c == nil {
			*c = parallel.Self()
		}
	}
	return g
}

// layerIndex returns the last integer component of a dotted name ("layers.3.mlp" → 3),
// or −1.
func layerIndex(name string) int {
	parts := strings.Split(name, ".")
	for i := len(parts) - 1; i >= 0; i-- {
		if n, err := strconv.Atoi(parts[i]); err == nil {
			return n
		}
	}
	return -1
}

// Params returns the router's, the experts' and the shared expert's parameters.
func (m *MoE) Params() []*Param {
	ps := collect(m.Router, m.Experts)
	if m.Shared != nil {
		ps = append(ps, m.Shared.Params()...)
	}
	return append(ps, params{m.SharedGate}.Params()...)
}

// Forward maps x [B, T, C] ([B, T/tp, C] under sequence parallelism) to the same shape.
// It panics if x is not [B, T, C].
func (m *MoE) Forward(p *Pass, x *tensor.Tensor) *tensor.Tensor { return sumBias(m.forward(p, x)) }

// forward is Forward for TransformerLayer's MLP sub-block; the bias is always nil (the
// experts add theirs, weighted by the probabilities).
func (m *MoE) forward(p *Pass, x *tensor.Tensor) (y, bias *tensor.Tensor) {
	split := m.split.of(p, x)
	xs := split.tokens(p, x) // [B, T(/tp), C]
	r := m.route(p, xs)
	m.record(p, r)
	y = m.dispatch(m, p, xs.Reshape(-1, xs.Dim(2)), r) // [B·T(/tp), C]
	y = split.outputs(p, y.Reshape(xs.Shape()...))     // [B, T(/tp), C] → x's shape
	return m.addShared(m, p, x, y), nil
}

// sharedFunc adds the shared expert's output for x [B, T, C] to y (or not).
type sharedFunc func(m *MoE, p *Pass, x, y *tensor.Tensor) *tensor.Tensor

// noShared is sharedFunc without a shared expert.
func noShared(_ *MoE, _ *Pass, _, y *tensor.Tensor) *tensor.Tensor { return y }

// withShared adds the shared expert's output.
func withShared(m *MoE, p *Pass, x, y *tensor.Tensor) *tensor.Tensor {
	return tensor.Add(y, sumBias(m.Shared.forward(p, x)))
}

// withGatedShared adds the shared expert's output scaled by sigmoid(x·SharedGateᵀ).
func withGatedShared(m *MoE, p *Pass, x, y *tensor.Tensor) *tensor.Tensor {
	s := sumBias(m.Shared.forward(p, x))                                        // [B, T, C]
	gate := tensor.Sigmoid(tensor.MatMulT(x, m.SharedGate.Tensor, false, true)) // [B, T, 1]
	return tensor.Add(y, tensor.Mul(s, gate))
}

// tokenSplit chooses the tokens a TP rank routes and dispatches: tokens returns them
// [B, T', C] from the block's input x [B, T, C]; outputs maps their routed outputs
// [B, T', C] back to the shape of x.
// of returns the split to use for the input x (a split may not fit every input).
type tokenSplit interface {
	of(p *Pass, x *tensor.Tensor) tokenSplit
	tokens(p *Pass, x *tensor.Tensor) *tensor.Tensor
	outputs(p *Pass, y *tensor.Tensor) *tensor.Tensor
}

// wholeTokens routes every token of the input: one TP rank, or sequence parallelism.
type wholeTokens struct{}

func (w wholeTokens) of(*Pass, *tensor.Tensor) tokenSplit            { return w }
func (wholeTokens) tokens(_ *Pass, x *tensor.Tensor) *tensor.Tensor  { return x }
func (wholeTokens) outputs(_ *Pass, y *tensor.Tensor) *tensor.Tensor { return y }

// seqChunk routes this TP rank's chunk of the sequence, under TP without sequence
// parallelism, where every TP rank holds the whole sequence: from ScatterToSP
// (backward: all-gather) to GatherFromSPNoReduce (backward: keep the chunk) the block
// runs as under sequence parallelism.
type seqChunk struct{ tp parallel.Comm }

// of returns s for x [B, T, C] whose T is a multiple of TP. Otherwise, in inference (a
// generation step of one token, a prompt of any length), every TP rank routes all the
// tokens (wholeTokens; the dispatchers return each rank the outputs of its own rows, so
// repeated tokens cost only time); in training, where the router's gradient and losses
// count each token once over TP, it panics.
func (s seqChunk) of(p *Pass, x *tensor.Tensor) tokenSplit {
	if x.Dim(1)%s.tp.Size() == 0 {
		return s
	}
	if p.Train {
		panic(fmt.Sprintf("nn: MoE: training under TP = %d without sequence parallelism splits the sequence over TP: %d tokens of %v do not split",
			s.tp.Size(), x.Dim(1), x.Shape()))
	}
	return wholeTokens{}
}

func (s seqChunk) tokens(p *Pass, x *tensor.Tensor) *tensor.Tensor {
	return parallel.ScatterToSP(p.Ctx, s.tp, x) // [B, T/tp, C]
}

func (s seqChunk) outputs(p *Pass, y *tensor.Tensor) *tensor.Tensor {
	return parallel.GatherFromSPNoReduce(p.Ctx, s.tp, y) // [B, T, C]
}
