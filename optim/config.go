package optim

import (
	"errors"
	"fmt"
	"math"

	"megago/nn/param"
	"megago/parallel"
	"megago/tensor"
)

// Rule is an update rule: AdamW, Adam or SGD. Its zero fields take PyTorch's defaults.
type Rule interface {
	// stateNames names the per-element state tensors, as PyTorch names them.
	stateNames() []string
	validate() error
	// update runs the rule's fused kernel on one shard; step is the 1-based number of
	// the update being made.
	update(be tensor.Backend, step int, gradScale float64, sh *shard)
}

// AdamW is Adam with decoupled weight decay (Loshchilov & Hutter; torch.optim.AdamW):
// each step multiplies the parameter by 1 − lr·wd before the Adam update. Zero fields
// take PyTorch's and Megatron's defaults: β1 0.9, β2 0.999, ε 1e-8 (so β1 = 0 cannot be
// asked for; use a tiny value).
type AdamW struct{ Beta1, Beta2, Eps float64 }

// Adam is torch.optim.Adam: weight decay is an L2 term added to the gradient. Zero
// fields take the defaults of AdamW.
type Adam struct{ Beta1, Beta2, Eps float64 }

// SGD is torch.optim.SGD: momentum (0 for none), dampening, Nesterov momentum. Weight
// decay is the L2 term added to the gradient.
type SGD struct {
	Momentum, Dampening float64
	Nesterov            bool
}

func adamDefaults(b1, b2, eps float64) (float64, float64, float64) {
	if b1 == 0 {
		b1 = 0.9
	}
	if b2 == 0 {
		b2 = 0.999
	}
	if eps == 0 {
		eps = 1e-8
	}
	return b1, b2, eps
}

func validateAdam(b1, b2, eps float64) error {
	b1, b2, eps = adamDefaults(b1, b2, eps)
	if b1 < 0 || b1 >= 1 || b2 < 0 || b2 >= 1 || eps <= 0 {
		return fmt.Errorf("optim: Adam betas (%v, %v) must lie in [0, 1) and eps %v be positive", b1, b2, eps)
	}
	return nil
}

func (AdamW) stateNames() []string { return []string{"exp_avg", "exp_avg_sq"} }
func (Adam) stateNames() []string  { return []string{"exp_avg", "exp_avg_sq"} }
func (r AdamW) validate() error    { return validateAdam(r.Beta1, r.Beta2, r.Eps) }
func (r Adam) validate() error     { return validateAdam(r.Beta1, r.Beta2, r.Eps) }
func (r AdamW) String() string     { return "AdamW" }
func (r Adam) String() string      { return "Adam" }
func (r SGD) String() string       { return "SGD" }
func (r SGD) stateNames() []string {
	if r.Momentum == 0 {
		return nil
	}
	return []string{"momentum_buffer"}
}

func (r SGD) validate() error {
	if r.Momentum < 0 || r.Dampening < 0 || r.Dampening > 1 {
		return fmt.Errorf("optim: SGD momentum %v and dampening %v must be non-negative, dampening at most 1", r.Momentum, r.Dampening)
	}
	if r.Nesterov && (r.Momentum == 0 || r.Dampening != 0) {
		return errors.New("optim: SGD Nesterov momentum needs momentum > 0 and zero dampening (as PyTorch)")
	}
	return nil
}

func (r AdamW) update(be tensor.Backend, step int, gradScale float64, sh *shard) {
	adamUpdate(be, r.Beta1, r.Beta2, r.Eps, true, step, gradScale, sh)
}

func (r Adam) update(be tensor.Backend, step int, gradScale float64, sh *shard) {
	adamUpdate(be, r.Beta1, r.Beta2, r.Eps, false, step, gradScale, sh)
}

func adamUpdate(be tensor.Backend, b1, b2, eps float64, decoupled bool, step int, gradScale float64, sh *shard) {
	b1, b2, eps = adamDefaults(b1, b2, eps)
	p := tensor.AdamParams{Beta1: b1, Beta2: b2, Eps: eps, Decoupled: decoupled, GradScale: gradScale,
		BiasCorrection1: 1 - math.Pow(b1, float64(step)), BiasCorrection2: 1 - math.Pow(b2, float64(step))}
	be.AdamStep(p, sh.kernelSegs, sh.master.Span(), sh.grad.Span(), sh.state[0].Span(), sh.state[1].Span(), spanOf(sh.model))
}

func (r SGD) update(be tensor.Backend, step int, gradScale float64, sh *shard) {
	p := tensor.SGDParams{Momentum: r.Momentum, Dampening: r.Dampening, Nesterov: r.Nesterov, First: step == 1, GradScale: gradScale}
	var buf tensor.Span
	if r.Momentum != 0 {
		buf = sh.state[0].Span()
	}
	be.SGDStep(p, sh.kernelSegs, sh.master.Span(), sh.grad.Span(), buf, spanOf(sh.model))
}

// spanOf returns t's span, or the empty span for nil.
func spanOf(t *tensor.Tensor) tensor.Span {
	if t == nil {
		return tensor.Span{}
	}
	return t.Span()
}

// Multipliers scale a parameter's learning rate and weight decay (Megatron's lr_mult and
// wd_mult; a parameter group in PyTorch's terms).
type Multipliers struct{ LR, WD float64 }

// DefaultMultipliers gives every parameter the base learning rate and exempts those
// marked NoWeightDecay (biases and other 1-D parameters: norm weights) from weight decay,
// as Megatron does.
func DefaultMultipliers(p *param.Param) Multipliers {
	if p.NoWeightDecay {
		return Multipliers{LR: 1, WD: 0}
	}
	return Multipliers{LR: 1, WD: 1}
}

// Groups are the communicators the optimizer uses; nil means a group of one rank, except
// for the expert groups, where nil means the dense group of the same role (the layout
// with expert-parallel size 1 and expert-TP = TP, where the two decompositions agree).
type Groups struct {
	// TP is the tensor-parallel group. Only its rank is used: gradients of TP-replicated
	// parameters are counted in the norm on TP rank 0 only.
	TP parallel.Comm
	// MP is the model-parallel group (TP × PP): the gradient norm and the inf/nan check
	// are reduced over it.
	MP parallel.Comm
	// DP is the data-parallel group (DP × CP when CP > 1): gradients are averaged over it,
	// and the distributed optimizer shards its state over it.
	DP parallel.Comm

	// ExpertTP is the expert-tensor-parallel group. Only its rank is used: an expert
	// parameter that every expert-TP rank holds whole (PartitionDim < 0) is counted in
	// the norm on expert-TP rank 0 only.
	ExpertTP parallel.Comm
	// ExpertDP is the expert-data-parallel group: gradients of expert parameters
	// (param.Param.Expert) are reduced over it, instead of DP, and scaled so that they
	// are averages over DP as the dense ones (Megatron's expert gradient scaling
	// factor: sum over ExpertDP, divided by DP's size); the distributed optimizer shards
	// their state over it.
	ExpertDP parallel.Comm
	// ExpertMP is the expert-model-parallel group (expert-TP × EP × PP): the squared
	// norm and the inf/nan flag of the expert gradients are reduced over it (and
	// ExpertDP under the distributed optimizer), the dense ones over MP (and DP), and
	// the two added, so every element of the model counts once. When ExpertMP and
	// ExpertDP are both nil the expert sums join the dense ones in one reduction.
	ExpertMP parallel.Comm
}

// MeshGroups returns the groups of a mesh: its TP, MP and DP-CP groups and, when the
// experts are laid out otherwise than the dense layers (EP > 1 or expert-TP ≠ TP), its
// expert groups; with the default expert layout they are the dense groups, and leaving
// them nil spares the extra reductions.
func MeshGroups(m *parallel.Mesh) Groups {
	g := Groups{TP: m.TP(), MP: m.MP(), DP: m.DPCP()}
	if s := m.Sizes(); s.EP > 1 || s.ETP != s.TP {
		g.ExpertTP, g.ExpertDP, g.ExpertMP = m.ExpertTP(), m.ExpertDP(), m.ExpertMP()
	}
	return g
}

// separateExperts reports whether the expert gradients' statistics are reduced over
// groups of their own (ExpertMP or ExpertDP set).
func (g Groups) separateExperts() bool { return g.ExpertMP != nil || g.ExpertDP != nil }

func (g Groups) withDefaults() Groups {
	orElse := func(c *parallel.Comm, def parallel.Comm) {
		if *c == nil {
			*c = def
		}
	}
	orElse(&g.TP, parallel.Self())
	orElse(&g.MP, parallel.Self())
	orElse(&g.DP, parallel.Self())
	orElse(&g.ExpertTP, g.TP)
	orElse(&g.ExpertDP, g.DP)
	orElse(&g.ExpertMP, g.MP)
	return g
}

// Config configures an Optimizer. The zero value of each field is its default, except LR,
// which must be set when there is no Schedule.
type Config struct {
	Rule Rule // nil means AdamW{}
	// LR and WeightDecay are the base learning rate and weight decay when Schedule is nil
	// (PyTorch's and Megatron's AdamW default weight decay is 0.01; 0 here means none).
	LR, WeightDecay float64
	// Schedule, if set, gives the base learning rate and weight decay of every step and
	// is advanced by one after each update that is not skipped (as Megatron does).
	Schedule *Schedule
	// Multipliers gives each parameter's lr and wd multipliers; nil means
	// DefaultMultipliers.
	Multipliers func(*param.Param) Multipliers
	// ClipGrad clips gradients to this global L2 norm; 0 means no clipping.
	ClipGrad float64
	// SkipGradNorm leaves out the global gradient norm and the inf/nan check that Step
	// makes before each update, a pass over every gradient (an eighth of the memory
	// traffic of an fp32 AdamW step) and two all-reduces: without clipping and a loss
	// scaler nothing in the update depends on them, and PyTorch's optimizers make
	// neither, nor does Megatron's without --clip-grad (its grad_norm is then None).
	// StepResult.GradNorm is then NaN and a non-finite gradient is not caught: it
	// reaches the parameters. Validate rejects it with ClipGrad or a Scaler.
	SkipGradNorm bool
	// Scaler scales the loss for fp16 training; nil means none (fp32 and bf16).
	Scaler LossScaler
	// Distributed shards master weights and optimizer state over Groups.DP (ZeRO-1,
	// Megatron's distributed optimizer).
	Distributed bool
	Groups      Groups
	// BucketSize is the bucket size of the flat buffers (see BufferConfig).
	BucketSize int
	// OverlapParamGather, under Distributed, leaves Step's all-gather of the updated
	// parameters to the next forward pass, bucket by bucket in forward order, each
	// parameter's BeforeForward hook waiting for its bucket (Megatron's
	// --overlap-param-gather; see Optimizer.FinishParamGather). The parameters are
	// the same, bit for bit.
	OverlapParamGather bool
	// Trace, if set, records each bucket's parameter all-gather (parallel.EventGather).
	Trace *parallel.Trace
}

// Validate reports the first invalid setting.
func (c Config) Validate() error {
	rule := c.Rule
	if rule == nil {
		rule = AdamW{}
	}
	if err := rule.validate(); err != nil {
		return err
	}
	switch {
	case c.Schedule == nil && !(c.LR > 0):
		return fmt.Errorf("optim: learning rate %v: need LR > 0 or a Schedule", c.LR)
	case c.WeightDecay < 0:
		return fmt.Errorf("optim: negative weight decay %v", c.WeightDecay)
	case c.ClipGrad < 0 || math.IsNaN(c.ClipGrad):
		return fmt.Errorf("optim: clip-grad norm %v must be ≥ 0", c.ClipGrad)
	case c.BucketSize < 0:
		return fmt.Errorf("optim: negative bucket size %d", c.BucketSize)
	case c.OverlapParamGather && !c.Distributed:
		return errors.New("optim: OverlapParamGather needs Distributed: only the distributed optimizer all-gathers parameters")
	case c.SkipGradNorm && (c.ClipGrad > 0 || c.Scaler != nil):
		return errors.New("optim: SkipGradNorm with clipping or a loss scaler, which need the gradient norm and the inf/nan check")
	case c.Scaler != nil && !(c.Scaler.Scale() > 0):
		return fmt.Errorf("optim: loss scale %v must be positive", c.Scaler.Scale())
	}
	return nil
}
