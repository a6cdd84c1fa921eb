package nn

import (
	"context"
	"fmt"
	"strings"

	"megago/parallel"
	"megago/tensor"
)

// Router is the gate of a mixture-of-experts layer, Megatron-core's TopKRouter: it scores
// each token against the E experts with fp32 logits x·Wᵀ (fp64 for an fp64 x, as
// Megatron's --moe-router-dtype fp64), chooses TopK experts per token
// (MoEConfig.ScoreFunction, PreSoftmax, expert bias), drops tokens over an expert's
// capacity (CapacityFactor, DropPolicy, PadToCapacity), and in training attaches the
// load-balancing loss and the z-loss to the autograd graph. See nn/doc.go for its
// semantics and where they follow Megatron.
type Router struct {
	Weight *Param // [E, C], replicated over TP
	// ExpertBias [E] f32 is added to the scores used to choose experts (not to the
	// probabilities) with MoEConfig.EnableExpertBias, and moved by UpdateExpertBias
	// after each step; nil without it. It is state to checkpoint, not a parameter.
	ExpertBias *tensor.Tensor

	set routerSettings
	// group is the token group: the ranks whose tokens together make up the tokens of
	// one model replica's micro-batch, over which load-balancing counts are summed (TP
	// under sequence parallelism; else one rank). global, if not nil, is the group
	// global_aux_loss counts over (TP×CP×DP, see SetRouterGlobalGroup).
	group  sumGroup
	global parallel.Comm
	// cpScale is the context-parallel size: under CP each rank's share of the auxiliary
	// losses' gradient is scaled by it, as the main loss's is (GPT.Loss), so that the
	// optimizer's average over DP×CP gives the whole loss's gradient.
	cpScale float64
	rate    float64 // expert bias update rate
	name    string

	stats      RouterStats
	biasCounts []float64    // [E] tokens kept per expert since the last UpdateExpertBias
	slots      []globalSlot // global_aux_loss counts of the step's micro-batches
}

// routerSettings are the router's choices from MoEConfig, resolved once.
type routerSettings struct {
	e, k              int
	kind              scoreKind
	lb                loadBalancing
	auxCoeff, zCoeff  float64
	capFactor         float64
	dropPosition, pad bool
}

// globalSlot is one micro-batch's expert counts for global_aux_loss, keyed by the
// micro-batch's Pass.SampleOffset.
type globalSlot struct {
	offset int
	counts []float64 // [E], summed over the global group
}

// Routing is a router's decision for the N = B·T tokens of its input x [B, T, C], in x's
// row-major order (token n = b·T + t; T is this rank's part of the sequence under
// sequence parallelism).
type Routing struct {
	// Probs [N, E] f32 (f64 for an f64 x) are the weights of the experts' outputs: the
	// routing probability where token n goes to expert e, 0 where it is not routed or
	// was dropped. Differentiable (with the auxiliary losses attached, see Router).
	Probs *tensor.Tensor
	// Map [N·E] says which tokens each expert processes, after capacity dropping; with
	// PadToCapacity it is the capacity mask, which adds tokens of probability 0 so every
	// expert gets exactly its capacity.
	Map []bool
	// TokensPerExpert [E] counts this rank's tokens routed to each expert before
	// dropping.
	TokensPerExpert []int
}

// RouterStats are what a router recorded for logging over the training micro-batches
// (Pass.Train) whose backward pass ran since the last TakeStats.
type RouterStats struct {
	// AuxLoss, SeqAuxLoss, GlobalAuxLoss and ZLoss are the sums over those micro-batches
	// of the coefficient-weighted losses, each the value of the whole token group (the
	// TP ranks' tokens together under sequence parallelism; for GlobalAuxLoss the sum of
	// every rank's term over the global group, as Megatron logs it).
	AuxLoss, SeqAuxLoss, GlobalAuxLoss, ZLoss float64
	// Micro is the number of micro-batches.
	Micro int
	// TokensPerExpert [E] sums Routing.TokensPerExpert over them (this rank's tokens).
	TokensPerExpert []int64
}

// NewRouter creates the router name (parameter name.weight [E, C], drawn from
// N(0, InitStd²) by global coordinates and replicated over TP; marked SequenceParallel
// under b.SequenceParallel, since each rank's gradient then covers only its tokens) for
// cfg.MoE, and ExpertBias (zeros) with EnableExpertBias. Under sequence parallelism the
// load-balancing counts are summed over b.TP, so the losses and gradients are those of
// one rank holding the whole sequence. It panics if cfg.MoE is not valid (see
// TransformerConfig.Validate) or has no experts.
func NewRouter(b *Builder, name string, cfg TransformerConfig) *Router {
	cfg = cfg.Defaults()
	m := cfg.MoE
	if m.NumExperts < 1 {
		panic(fmt.Sprintf("nn: NewRouter %s: NumExperts = %d, want ≥ 1", name, m.NumExperts))
	}
	if errs := m.validate(cfg.NumLayers); len(errs) > 0 {
		panic(fmt.Sprintf("nn: NewRouter %s: %s", name, strings.Join(errs, "; ")))
	}
	r := &Router{set: newRouterSettings(m), group: parallel.Self(), rate: m.biasUpdateRate(), name: name}
	r.Weight = newParam(b, name+".weight", tensor.Shape{m.NumExperts, cfg.Hidden}, -1, Normal(cfg.InitStd))
	r.Weight.SequenceParallel = b.SequenceParallel
	if b.SequenceParallel {
		r.group = b.TP
	}
	r.cpScale = 1
	if b.CP != nil && b.CP.Size() > 1 { // the sequence's tokens are spread over CP too
		r.group, r.cpScale = groupPair{r.group, b.CP}, float64(b.CP.Size())
	}
	if m.EnableExpertBias {
		r.ExpertBias = tensor.Zeros(b.Dev, tensor.F32, m.NumExperts)
		r.biasCounts = make([]float64, m.NumExperts)
	}
	return r
}

// newRouterSettings resolves m's router fields (m valid).
func newRouterSettings(m MoEConfig) routerSettings {
	s := routerSettings{e: m.NumExperts, k: m.topK(), auxCoeff: m.AuxLossCoeff, zCoeff: m.ZLossCoeff,
		capFactor: m.CapacityFactor, dropPosition: m.DropPolicy == "position", pad: m.PadToCapacity}
	switch {
	case m.ScoreFunction == "sigmoid":
		s.kind = topKOfSigmoid
	case m.PreSoftmax:
		s.kind = topKOfSoftmax
	}
	switch m.LoadBalancing {
	case "seq_aux_loss":
		s.lb = lbSeq
	case "global_aux_loss":
		s.lb = lbGlobal
	case "none":
		s.lb = lbNone
	}
	return s
}

// Params returns the weight.
func (r *Router) Params() []*Param {
	if r == nil {
		return nil
	}
	return []*Param{r.Weight}
}

// Route routes the tokens of x [B, T, C] ([B, T/tp, C] under sequence parallelism). In
// training (p.Train, gradients recorded) the load-balancing loss and the z-loss of the
// configuration are attached to Probs' graph: their gradients, times p.LossScale (0
// means 1), flow into x and the weight during backward, and that backward records the
// micro-batch in the router's statistics (TakeStats) and expert-bias counts. Under
// sequence parallelism with a load-balancing loss or z-loss, every TP rank must call it
// (it all-reduces token counts over b.TP). It panics if x is not [B, T, C], or with the
// *parallel.Error if that communication fails.
func (r *Router) Route(p *Pass, x *tensor.Tensor) Routing {
	c := r.Weight.Shape()[1]
	if s := x.Shape(); len(s) != 3 || s[2] != c {
		panic(fmt.Sprintf("nn: Router.Route: input %v, want [B, T, %d]", s, c))
	}
	b, t := x.Dim(0), x.Dim(1)
	n := b * t
	dt := tensor.F32
	if x.DType() == tensor.F64 {
		dt = tensor.F64
	}
	logits := tensor.MatMulT(x.Reshape(n, c).Cast(dt), r.Weight.Tensor.Cast(dt), false, true) // [N, E]
	host := tensor.ToSlice[float64](logits)
	var bias []float64
	if r.ExpertBias != nil {
		bias = tensor.ToSlice[float64](r.ExpertBias)
	}
	choice := chooseExperts(r.set, host, bias, n)
	if r.set.capFactor > 0 {
		choice.dropOverCapacity(r.set.capFactor, r.set.dropPosition, r.set.pad, b, t)
	}
	f := &routeFn{r: r, logits: host, choice: choice, scale: p.LossScale, train: p.Train}
	if f.scale == 0 {
		f.scale = 1
	}
	f.scale *= r.cpScale
	if p.Train && x.Device().GradEnabled() {
		f.loss = r.newRouterLoss(p, x.Device(), host, b, t)
	}
	probs := tensor.Apply("MoERouter", f, logits)[0] // [N, E]
	return Routing{Probs: probs, Map: choice.keep, TokensPerExpert: choice.tokens}
}

// record adds a micro-batch whose backward ran to the statistics and expert-bias counts.
func (r *Router) record(c *routerChoice, l *routerLoss) {
	s := &r.stats
	s.Micro++
	if s.TokensPerExpert == nil {
		s.TokensPerExpert = make([]int64, r.set.e)
	}
	for j, v := range c.tokens {
		s.TokensPerExpert[j] += int64(v)
	}
	if l != nil {
		s.AuxLoss += l.aux
		s.SeqAuxLoss += l.seqAux
		s.GlobalAuxLoss += l.globalAux
		s.ZLoss += l.z
	}
	if r.biasCounts != nil {
		for i, k := range c.keep {
			if k {
				r.biasCounts[i%c.e]++
			}
		}
	}
}

// TakeStats returns the statistics recorded since the last call and resets them.
func (r *Router) TakeStats() RouterStats {
	s := r.stats
	r.stats = RouterStats{}
	if s.TokensPerExpert == nil {
		s.TokensPerExpert = make([]int64, r.set.e)
	}
	return s
}

// accumulateGlobal records a micro-batch's expert counts [E] for global_aux_loss under
// its sample offset and returns the mean counts of the step's micro-batches up to it: a
// second forward of the same micro-batch (activation recomputation) sees what its first
// one saw, so recomputation changes no gradient.
func (r *Router) accumulateGlobal(offset int, counts []float64) []float64 {
	i := 0
	for i < len(r.slots) && r.slots[i].offset != offset {
		i++
	}
	if i == len(r.slots) {
		r.slots = append(r.slots, globalSlot{offset: offset})
	}
	r.slots[i].counts = counts
	avg := make([]float64, len(counts))
	for _, s := range r.slots[:i+1] {
		for j, v := range s.counts {
			avg[j] += v
		}
	}
	for j := range avg {
		avg[j] /= float64(i + 1)
	}
	return avg
}

// sumGroup is a group the router sums token counts over: a parallel.Comm, or the
// product of two (groupPair).
type sumGroup interface {
	Size() int
	Name() string
	AllReduce(ctx context.Context, t *tensor.Tensor, op parallel.Op) error
}

// groupPair is the product of two groups of distinct axes (TP and CP): a sum over it is
// the sum over a and then over b.
type groupPair struct{ a, b sumGroup }

func (g groupPair) Size() int    { return g.a.Size() * g.b.Size() }
func (g groupPair) Name() string { return g.a.Name() + "×" + g.b.Name() }
func (g groupPair) AllReduce(ctx context.Context, t *tensor.Tensor, op parallel.Op) error {
	if err := g.a.AllReduce(ctx, t, op); err != nil {
		return err
	}
	return g.b.AllReduce(ctx, t, op)
}

// globalGroup returns the group global_aux_loss counts tokens over.
func (r *Router) globalGroup() sumGroup {
	if r.global != nil {
		return r.global
	}
	return r.group
}

// routerModule is implemented by modules that hold routers (mixture-of-experts layers
// and what contains them): UpdateExpertBias and SetRouterGlobalGroup find routers
// through it.
type routerModule interface{ routers() []*Router }

func (r *Router) routers() []*Router { return []*Router{r} }

// State returns the router's expert bias as name.expert_bias (nothing without one), for
// checkpoints (Stateful).
func (r *Router) State() []NamedTensor {
	if r.ExpertBias == nil {
		return nil
	}
	return []NamedTensor{{Name: r.name + ".expert_bias", Tensor: r.ExpertBias}}
}

// routersOf returns the routers of ms, in order.
func routersOf(ms []Module) []*Router {
	var out []*Router
	for _, m := range ms {
		switch h := m.(type) {
		case routerModule:
			out = append(out, h.routers()...)
		case moeHolder:
			for _, b := range h.moeBlocks() {
				out = append(out, b.Router)
			}
		}
	}
	return out
}

// SetRouterGlobalGroup sets the group over which the routers of ms count tokens for
// global_aux_loss: the TP×CP×DP group of ranks that see different tokens of the global
// batch (Megatron's tp_dp_cp group). Without it they count over their token group only
// (TP under sequence parallelism).
func SetRouterGlobalGroup(g parallel.Comm, ms ...Module) {
	for _, r := range routersOf(ms) {
		r.global = g
	}
}
