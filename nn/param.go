package nn

import (
	"context"
	"fmt"

	"megago/parallel"
	"megago/tensor"
)

// Module is anything that holds parameters: layers and models.
type Module interface {
	// Params returns the module's parameters in a fixed order (construction order).
	Params() []*Param
}

// collect concatenates the parameters of modules. A nil *T module must return no
// parameters from its Params method (the interface holding it is not nil).
func collect(ms ...Module) []*Param {
	var out []*Param
	for _, m := range ms {
		out = append(out, m.Params()...)
	}
	return out
}

// beforeForward runs the BeforeForward hook of every parameter of ms (see
// param.Param.SetBeforeForward), just before a forward pass reads them: per transformer
// layer, and for the embedding and the heads where they are used, so that an optimizer
// gathering parameters in the background is waited for bucket by bucket. ms must not
// hold nil modules.
func beforeForward(ms ...Module) {
	for _, m := range ms {
		for _, p := range m.Params() {
			p.BeforeForward()
		}
	}
}

// params is a Module made of a list of parameters (nil entries skipped).
type params []*Param

func (ps params) Params() []*Param {
	var out []*Param
	for _, p := range ps {
		if p != nil {
			out = append(out, p)
		}
	}
	return out
}

// Init says how to initialize a new parameter.
type Init struct {
	Dist tensor.Dist // DistNormal (mean 0, std A) or DistUniform; 0 means constant Value
	A    float64
	// Value fills the parameter when Dist is 0 (1 for norm weights, 0 for biases).
	Value float64
}

// Normal returns an Init drawing from N(0, std²).
func Normal(std float64) Init { return Init{Dist: tensor.DistNormal, A: std} }

// Constant returns an Init filling with v.
func Constant(v float64) Init { return Init{Value: v} }

// newParam creates this TP rank's shard of parameter name of global shape global split
// along dim (−1: not split) over a group of size tp, initialized from rng by global
// coordinates, so every layout starts from the same global values.
func newParam(b *Builder, name string, global tensor.Shape, dim int, init Init) *Param {
	tp, rank := b.TP.Size(), b.TP.Rank()
	local := global.Clone()
	if dim >= 0 {
		if global[dim]%tp != 0 {
			panic(fmt.Sprintf("nn: %s: dim %d of %v not divisible by tp %d", name, dim, global, tp))
		}
		local[dim] = global[dim] / tp
	}
	p := &Param{Name: name, GlobalShape: global.Clone(), PartitionDim: dim, PartitionStride: 1, TPRank: rank,
		TPReplicated: dim < 0, NoWeightDecay: len(global) == 1}
	region := tensor.Region{Full: p.GlobalShape, Start: make([]int, len(global)), Size: local}
	if dim < 0 {
		p.TPRank = 0
	} else {
		region.Start[dim] = rank * local[dim]
	}
	p.Tensor = initRegion(b, name, init, region)
	return p
}

// initRegion returns region of parameter name's global tensor initialized by init from
// b.RNG (drawn by global coordinates), requiring grad.
func initRegion(b *Builder, name string, init Init, region tensor.Region) *tensor.Tensor {
	var t *tensor.Tensor
	switch init.Dist {
	case 0:
		t = tensor.Full(b.Dev, b.DType, init.Value, region.Size...)
	case tensor.DistNormal:
		t = b.RNG.Named(name).Normal(b.Dev, b.DType, region, 0, init.A)
	default:
		t = tensor.Random(b.Dev, b.DType, b.RNG.Named(name), init.Dist, -init.A, init.A, region)
	}
	t.SetRequiresGrad(true)
	return t
}

// Builder carries what layer constructors need: the device and dtype of parameters, the
// initialization generator, and the TP group the layer communicates over. Parameters are
// created outside any scope of Dev (see tensor.Scope).
type Builder struct {
	Dev   *tensor.Device
	DType tensor.DType
	RNG   tensor.RNG
	// TP is the tensor-parallel group; a group of size 1 makes every layer a plain layer.
	TP parallel.Comm
	// Experts are the groups of mixture-of-experts layers; zero means one rank each.
	Experts ExpertGroups
	// CP is the context-parallel group (nil: one rank): each of its ranks holds the
	// sequence positions CPPositions gives it, and attention exchanges keys and values
	// over it.
	CP parallel.Comm

	cpGroups *cpHierarchy // a2a+p2p's groups of CP, split on first use (cpHierarchy)
	// SequenceParallel splits activations along T between TP regions.
	SequenceParallel bool
	// Recompute selects activation recomputation in the transformer layers built (see
	// Recompute); the zero value keeps every activation.
	Recompute Recompute
	// Unfused builds layers with the unfused compositions of ordinary ops that define
	// tensor's fused operations (attention through the whole [B, NH/tp, Tq, Tk] score
	// matrix; separate bias, activation, dropout, residual and norm ops) instead of the
	// fused ops. Results agree within rounding; it is the reference that tests and
	// benchmarks compare the fused layers with.
	Unfused bool
}

// Pass carries what varies from one forward pass to the next: the context communication
// runs under, whether dropout is active, the dropout generator (keyed by step and
// micro-batch by the caller), and the global index of the micro-batch's first sample, so
// dropout masks do not depend on how samples are spread over DP ranks.
type Pass struct {
	Ctx          context.Context
	Train        bool
	RNG          tensor.RNG
	SampleOffset int
	// LossScale is the factor by which the training loop multiplies this micro-batch's
	// loss before backward (1/micro-batches times the loss scaler's scale); 0 means 1.
	// Layers that add auxiliary losses inside the model (mixture-of-experts load
	// balancing) scale their gradients by it, as Megatron's MoEAuxLossAutoScaler does.
	LossScale float64
	// Trace, if not nil, records the context-parallel ring's steps (parallel.EventCPRing
	// transfers and EventCPAttention computation; in backward EventCPRingBackward and
	// EventCPAttentionBackward), to show that they overlap.
	Trace *parallel.Trace
	// Packed, if not nil, keeps the linear layers' weights packed for the CPU's matrix
	// multiply while gradients are off (inference: serve's engine), the same results
	// faster, for as much memory again as the weights (tensor.PackedWeights).
	Packed *tensor.PackedWeights

	// replaying marks the copy of a Pass that activation recomputation reruns a layer
	// with (replay): layers compute the same, but record statistics only once.
	replaying bool
}

// replay returns a copy of p for recomputing a forward pass.
func (p *Pass) replay() *Pass {
	q := *p
	q.replaying = true
	return &q
}

// Eval returns a Pass for inference: no dropout.
func Eval(ctx context.Context) *Pass { return &Pass{Ctx: ctx} }

// ReduceSequenceParallelGrads all-reduces (sums) over tp the gradients of parameters
// marked SequenceParallel, whose per-rank gradients each cover only that rank's part of
// the sequence. Call it after backward and before clipping or the optimizer step.
func ReduceSequenceParallelGrads(ctx context.Context, tp parallel.Comm, ps []*Param) error {
	if tp.Size() == 1 {
		return nil
	}
	for _, p := range ps {
		if p.SequenceParallel && p.Grad() != nil {
			if err := tp.AllReduce(ctx, p.Grad(), parallel.Sum); err != nil {
				return fmt.Errorf("nn: reduce sequence-parallel gradient of %s: %w", p.Name, err)
			}
		}
	}
	return nil
}
