package nn

import (
	"fmt"

	"megago/parallel"
	"megago/tensor"
)

// Experts are the routed experts of a mixture-of-experts layer: E MLPs of hidden size F
// (MoEConfig.FFNHidden), their weights stacked with the expert as dim 0. This rank holds
// the E/ep experts [epRank·E/ep, (epRank+1)·E/ep) of its expert-parallel group, each
// split over the expert-tensor-parallel group by F (etp below) as the dense MLP is over
// TP: fc1 (and gate) by output rows, fc2 by input columns.
type Experts struct {
	Gate *Param // [E/ep, F/etp, C]; SwiGLU only
	FC1  *Param // [E/ep, F/etp, C]; the up projection with SwiGLU
	FC2  *Param // [E/ep, C, F/etp]
	// Biases, with TransformerConfig.Bias: GateBias and FC1Bias [E/ep, F/etp], FC2Bias
	// [E/ep, C] (replicated over expert-TP).
	GateBias, FC1Bias, FC2Bias *Param

	tp  parallel.Comm // expert-TP group
	ops layerOps
	// act computes the activation [M, F/etp] of a dispatched input x [M, C].
	act func(e *Experts, x *tensor.Tensor, counts []int) *tensor.Tensor
	// outBias adds fc2's bias: noExpertBias or firstRankBias.
	outBias expertBiasFunc
	// matmul is x·w[e]ᵀ for each expert's rows of x [M, K] and w [E/ep, N, K]: one
	// tensor.GroupedMatMul (groupedProduct) or one MatMul per expert (expertProducts).
	matmul func(x, w *tensor.Tensor, counts []int) *tensor.Tensor
}

// NewExperts creates name.fc1.weight, name.gate.weight (SwiGLU), name.fc2.weight and
// their biases with cfg.Bias, for the expert groups b.Experts (nil: one rank). It panics
// if E is not divisible by the EP size, F by the expert-TP size, or the activation is not
// one of the Activations.
func NewExperts(b *Builder, name string, cfg TransformerConfig) *Experts {
	cfg = cfg.Defaults()
	g := b.Experts.orSelf()
	e, f, c := cfg.MoE.NumExperts, moeFFNHidden(cfg), cfg.Hidden
	if e%g.EP.Size() != 0 || f%g.TP.Size() != 0 {
		panic(fmt.Sprintf("nn: Experts %s: %d experts of hidden %d over ep %d, expert tp %d: not divisible", name, e, f, g.EP.Size(), g.TP.Size()))
	}
	x := &Experts{tp: g.TP, ops: b.ops(), act: expertActivation(cfg.Activation), matmul: expertProducts, outBias: noExpertBias}
	if cfg.MoE.GroupedGEMM {
		x.matmul = groupedProduct
	}
	in, out := Normal(cfg.InitStd), Normal(cfg.OutputInitStd())
	if cfg.Activation == SwiGLU {
		x.Gate = newExpertParam(b, name+".gate.weight", tensor.Shape{e, f, c}, 1, in)
	}
	x.FC1 = newExpertParam(b, name+".fc1.weight", tensor.Shape{e, f, c}, 1, in)
	x.FC2 = newExpertParam(b, name+".fc2.weight", tensor.Shape{e, c, f}, 2, out)
	if cfg.Bias {
		if x.Gate != nil {
			x.GateBias = newExpertParam(b, name+".gate.bias", tensor.Shape{e, f}, 1, Constant(0))
		}
		x.FC1Bias = newExpertParam(b, name+".fc1.bias", tensor.Shape{e, f}, 1, Constant(0))
		x.FC2Bias = newExpertParam(b, name+".fc2.bias", tensor.Shape{e, c}, -1, Constant(0))
		x.outBias = firstRankBias(g.TP.Rank())
	}
	return x
}

// moeFFNHidden is each expert's hidden size: MoE.FFNHidden, or the dense FFNHidden.
func moeFFNHidden(cfg TransformerConfig) int {
	if cfg.MoE.FFNHidden > 0 {
		return cfg.MoE.FFNHidden
	}
	return cfg.FFNHidden
}

// newExpertParam creates this rank's shard of expert parameter name of global shape
// [E, ...]: dim 0 split over b.Experts.EP, dim (−1: none) over b.Experts.TP, initialized
// from the global coordinates so every layout starts from the same values.
func newExpertParam(b *Builder, name string, global tensor.Shape, dim int, init Init) *Param {
	g := b.Experts.orSelf()
	local := global.Clone()
	local[0] /= g.EP.Size()
	p := &Param{Name: name, GlobalShape: global.Clone(), PartitionDim: dim, PartitionStride: 1,
		TPReplicated: dim < 0, NoWeightDecay: init.Dist == 0, Expert: true, EPRank: g.EP.Rank()}
	region := tensor.Region{Full: p.GlobalShape, Start: make([]int, len(global)), Size: local}
	region.Start[0] = g.EP.Rank() * local[0]
	if dim >= 0 {
		local[dim] /= g.TP.Size()
		p.TPRank = g.TP.Rank()
		region.Start[dim] = p.TPRank * local[dim]
	}
	p.Tensor = initRegion(b, name, init, region)
	return p
}

// Params returns the weights and biases.
func (x *Experts) Params() []*Param {
	return params{x.Gate, x.FC1, x.FC2, x.GateBias, x.FC1Bias, x.FC2Bias}.Params()
}

// Forward maps the dispatched tokens xs [M, C], grouped by local expert (counts[e] rows
// for local expert e, in order), to the experts' outputs [M, C]: with expert-TP each rank's
// partial sum over its F/etp columns, fc2's bias added on expert-TP rank 0 only, so the sum
// over the group is the output. It panics if counts does not have E/ep entries summing
// to M.
func (x *Experts) Forward(p *Pass, xs *tensor.Tensor, counts []int) *tensor.Tensor {
	x.checkCounts(xs, counts)
	if xs.Dim(0) == 0 {
		return xs // [0, C], kept in the graph (the dispatcher's collectives run in backward)
	}
	h := x.act(x, xs, counts)              // [M, F/etp]
	y := x.matmul(h, x.FC2.Tensor, counts) // [M, C]
	return x.outBias(x, p, y, counts)
}

// checkCounts panics unless counts has E/ep entries summing to xs's rows.
func (x *Experts) checkCounts(xs *tensor.Tensor, counts []int) {
	if len(counts) != x.FC1.Tensor.Dim(0) || sumInts(counts) != xs.Dim(0) {
		panic(fmt.Sprintf("nn: Experts: counts %v for %d local experts and %v tokens", counts, x.FC1.Tensor.Dim(0), xs.Shape()))
	}
}

// expertBiasFunc adds fc2's bias to the experts' output y [M, C] (or not).
type expertBiasFunc func(x *Experts, p *Pass, y *tensor.Tensor, counts []int) *tensor.Tensor

// noExpertBias is expertBiasFunc without biases.
func noExpertBias(_ *Experts, _ *Pass, y *tensor.Tensor, _ []int) *tensor.Tensor { return y }

// firstRankBias returns an expertBiasFunc for expert-TP rank rank: fc2's bias counts
// once in the sum over expert-TP, so rank 0 adds it and the others add zeros; CopyToTP
// gives every rank its whole gradient.
func firstRankBias(rank int) expertBiasFunc {
	scale := 0.0
	if rank == 0 {
		scale = 1
	}
	return func(x *Experts, p *Pass, y *tensor.Tensor, counts []int) *tensor.Tensor {
		b := parallel.CopyToTP(p.Ctx, x.tp, x.FC2Bias.Tensor) // [E/ep, C]
		if scale != 1 {
			b = tensor.Scale(b, scale)
		}
		return tensor.Add(y, rowsOf(b, counts))
	}
}

// expertActivation returns how Experts compute activation a of fc1 (and gate) with their
// layer ops, the biases added per row before it. It panics for an unknown activation.
func expertActivation(a Activation) func(x *Experts, xs *tensor.Tensor, counts []int) *tensor.Tensor {
	switch a {
	case GeLU, GeLUErf:
		form := tensor.OpGeLUTanh
		if a == GeLUErf {
			form = tensor.OpGeLUErf
		}
		return func(x *Experts, xs *tensor.Tensor, counts []int) *tensor.Tensor {
			return x.ops.biasGeLU(x.project(xs, x.FC1, x.FC1Bias, counts), nil, form)
		}
	case ReLU:
		return func(x *Experts, xs *tensor.Tensor, counts []int) *tensor.Tensor {
			return tensor.ReLU(x.project(xs, x.FC1, x.FC1Bias, counts))
		}
	case SwiGLU:
		return func(x *Experts, xs *tensor.Tensor, counts []int) *tensor.Tensor {
			gate := x.project(xs, x.Gate, x.GateBias, counts) // [M, F/etp]
			up := x.project(xs, x.FC1, x.FC1Bias, counts)
			return x.ops.biasSwiGLU(gate, up, nil, nil)
		}
	}
	panic(fmt.Sprintf("nn: unknown activation %d", a))
}

// project returns xs·w[e]ᵀ (+ bias[e]) for each local expert e's rows of xs [M, C]:
// [M, F/etp].
func (x *Experts) project(xs *tensor.Tensor, w, bias *Param, counts []int) *tensor.Tensor {
	h := x.matmul(xs, w.Tensor, counts)
	if bias == nil {
		return h
	}
	return tensor.Add(h, rowsOf(bias.Tensor, counts))
}

// groupedProduct is x·w[e]ᵀ over each expert's rows of x [M, K] for w [E/ep, N, K] as one
// tensor.GroupedMatMul: [M, N].
func groupedProduct(x, w *tensor.Tensor, counts []int) *tensor.Tensor {
	return tensor.GroupedMatMul(x, w, counts, true)
}

// expertProducts is groupedProduct computed as one MatMul per expert with rows
// (Megatron's SequentialMLP), the reference the grouped product is tested against.
func expertProducts(x, w *tensor.Tensor, counts []int) *tensor.Tensor {
	n, k := w.Dim(1), w.Dim(2)
	ones := make([]int, len(counts))
	for e := range ones {
		ones[e] = 1
	}
	// Split, not Narrow: one gradient for all of w and of x, not one zero-filled per expert.
	ws, xs := tensor.Split(w, 0, ones...), tensor.Split(x, 0, counts...)
	var parts []*tensor.Tensor
	for e, c := range counts {
		if c > 0 {
			parts = append(parts, tensor.MatMulT(xs[e], ws[e].Reshape(n, k), false, true)) // [c, N]
		}
	}
	if len(parts) == 1 {
		return parts[0]
	}
	return tensor.Concat(0, parts...)
}

// rowsOf returns b [E/ep, D] repeated per row: counts[e] rows of b[e] for each e, in
// order: [Σ counts, D].
func rowsOf(b *tensor.Tensor, counts []int) *tensor.Tensor {
	idx := make([]int, 0, sumInts(counts))
	for e, c := range counts {
		for range c {
			idx = append(idx, e)
		}
	}
	return pickRows(b, idx)
}

// sumInts returns the sum of v.
func sumInts(v []int) int {
	s := 0
	for _, x := range v {
		s += x
	}
	return s
}
