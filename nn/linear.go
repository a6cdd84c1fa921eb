package nn

import (
	"fmt"

	"megago/parallel"
	"megago/tensor"
)

// LinearOptions configures a linear layer. The variants it selects (GatherOutput,
// SkipBiasAdd, ScatterInput) are resolved by the constructor, which picks the layer's
// forward path once.
type LinearOptions struct {
	Bias bool
	Init Init // of the weight; biases start at zero

	// GatherOutput all-gathers a column-parallel layer's output features (Megatron's
	// gather_output): [B, T, O] instead of this rank's [B, T, O/tp].
	GatherOutput bool
	// SkipBiasAdd makes a parallel layer's ForwardWithBias return its output without the
	// bias, and the bias, for the caller to fuse the add later (Megatron's
	// skip_bias_add); Forward still adds it. It has no effect with GatherOutput: this
	// rank's bias slice is added before the gather.
	SkipBiasAdd bool
	// ScatterInput makes a row-parallel layer take the whole input [B, T, I] and scatter
	// its features over TP (Megatron's input_is_parallel=False) instead of taking this
	// rank's slice [B, T, I/tp].
	ScatterInput bool
}

// checkLinearOptions panics if o selects a variant that layer kind (for name) lacks.
func checkLinearOptions(kind, name string, o LinearOptions, gather, skip, scatter bool) {
	if o.GatherOutput && !gather || o.SkipBiasAdd && !skip || o.ScatterInput && !scatter {
		panic(fmt.Sprintf("nn: %s %s: GatherOutput %v, SkipBiasAdd %v, ScatterInput %v: "+
			"GatherOutput is column-parallel only, ScatterInput row-parallel only, SkipBiasAdd for parallel layers",
			kind, name, o.GatherOutput, o.SkipBiasAdd, o.ScatterInput))
	}
}

// biasFunc finishes a linear layer's output y with its bias b (nil: none): addBias adds
// it; returnBias returns it beside y, for the caller to fuse (SkipBiasAdd).
type biasFunc func(y *tensor.Tensor, b *Param) (out, bias *tensor.Tensor)

func addBias(y *tensor.Tensor, b *Param) (out, bias *tensor.Tensor) {
	if b == nil {
		return y, nil
	}
	out = tensor.Add(y, b.Tensor)
	releaseDead(y, out) // the product, this linear's own: Add's backward needs no data
	return out, nil
}

func returnBias(y *tensor.Tensor, b *Param) (out, bias *tensor.Tensor) {
	if b == nil {
		return y, nil
	}
	return y, b.Tensor
}

// sumBias returns y + bias, or y when bias is nil: ForwardWithBias's results added.
func sumBias(y, bias *tensor.Tensor) *tensor.Tensor {
	if bias == nil {
		return y
	}
	return tensor.Add(y, bias)
}

// ColumnParallelLinear is y = x·Wᵀ + b with W [O, I] split by output rows over the TP
// group: rank r owns rows [r·O/tp, (r+1)·O/tp) and the matching bias. Its input goes
// through CopyToTP (or GatherFromSP under sequence parallelism); its output is this rank's
// slice of the features, [B, T, O/tp], unless built with GatherOutput, which all-gathers
// it to [B, T, O]. With a TP group of size 1 it is a plain linear layer.
type ColumnParallelLinear struct {
	Weight *Param // [O/tp, I]
	Bias   *Param // [O/tp], nil without bias

	region tpRegion
	bias   biasFunc // addBias, or returnBias with SkipBiasAdd
	gather mapping  // identity, or GatherFromTP with GatherOutput
}

// NewColumnParallelLinear creates the layer's parameters name.weight and name.bias. It
// panics if out is not divisible by the TP size, or if o sets ScatterInput.
func NewColumnParallelLinear(b *Builder, name string, in, out int, o LinearOptions) *ColumnParallelLinear {
	if out%b.TP.Size() != 0 {
		panic(fmt.Sprintf("nn: ColumnParallelLinear %s: out features %d not divisible by tp %d", name, out, b.TP.Size()))
	}
	checkLinearOptions("ColumnParallelLinear", name, o, true, true, false)
	w := newParam(b, name+".weight", tensor.Shape{out, in}, 0, o.Init)
	var bias *Param
	if o.Bias {
		bias = newParam(b, name+".bias", tensor.Shape{out}, 0, Constant(0))
	}
	return columnParallelOf(b, w, bias, o)
}

// columnParallelOf returns a ColumnParallelLinear over existing parameters (a tied output
// layer's: the word embedding), with o's variants (o.Bias and o.Init unused).
func columnParallelOf(b *Builder, weight, bias *Param, o LinearOptions) *ColumnParallelLinear {
	l := &ColumnParallelLinear{Weight: weight, Bias: bias, region: b.region(), bias: addBias, gather: identity}
	switch {
	case o.GatherOutput:
		l.gather = parallel.GatherFromTP
	case o.SkipBiasAdd:
		l.bias = returnBias
	}
	return l
}

// Params returns the weight and bias.
func (l *ColumnParallelLinear) Params() []*Param {
	if l == nil {
		return nil
	}
	return params{l.Weight, l.Bias}.Params()
}

// Forward maps x [B, T, I] (or [B, T/tp, I] under sequence parallelism) to [B, T, O/tp]
// ([B, T, O] with GatherOutput), bias added.
func (l *ColumnParallelLinear) Forward(p *Pass, x *tensor.Tensor) *tensor.Tensor {
	return sumBias(l.ForwardWithBias(p, x))
}

// ForwardWithBias is Forward returning the bias separately when built with SkipBiasAdd
// (nil otherwise, or without bias).
func (l *ColumnParallelLinear) ForwardWithBias(p *Pass, x *tensor.Tensor) (y, bias *tensor.Tensor) {
	x = l.region.toColumn(p, x)              // [B, T, I]
	y = p.Packed.MatMulT(x, l.Weight.Tensor) // [B, T, O/tp], x·Wᵀ
	y, bias = l.bias(y, l.Bias)
	return l.gather(p.Ctx, l.region.tp, y), bias // [B, T, O] with GatherOutput
}

// RowParallelLinear is y = x·Wᵀ + b with W [O, I] split by input columns over the TP
// group: rank r owns columns [r·I/tp, (r+1)·I/tp). Its input is this rank's slice of the
// features, [B, T, I/tp] (the usual case after a column-parallel layer), or, built with
// ScatterInput, the whole [B, T, I], which it scatters. The partial products are summed
// by ReduceFromTP (or ReduceScatterToSP under sequence parallelism, giving [B, T/tp, O])
// and the bias, which is not split, is added after the reduction.
type RowParallelLinear struct {
	Weight *Param // [O, I/tp]
	Bias   *Param // [O], replicated; nil without bias

	region  tpRegion
	scatter mapping  // identity, or ScatterToTP with ScatterInput
	bias    biasFunc // addBias, or returnBias with SkipBiasAdd
}

// NewRowParallelLinear creates the layer's parameters. It panics if in is not divisible
// by the TP size, or if o sets GatherOutput.
func NewRowParallelLinear(b *Builder, name string, in, out int, o LinearOptions) *RowParallelLinear {
	if in%b.TP.Size() != 0 {
		panic(fmt.Sprintf("nn: RowParallelLinear %s: in features %d not divisible by tp %d", name, in, b.TP.Size()))
	}
	checkLinearOptions("RowParallelLinear", name, o, false, true, true)
	l := &RowParallelLinear{region: b.region(), scatter: identity, bias: addBias}
	if o.ScatterInput {
		l.scatter = parallel.ScatterToTP
	}
	if o.SkipBiasAdd {
		l.bias = returnBias
	}
	l.Weight = newParam(b, name+".weight", tensor.Shape{out, in}, 1, o.Init)
	if o.Bias {
		l.Bias = newParam(b, name+".bias", tensor.Shape{out}, -1, Constant(0))
		l.Bias.SequenceParallel = b.SequenceParallel
	}
	return l
}

// Params returns the weight and bias.
func (l *RowParallelLinear) Params() []*Param {
	if l == nil {
		return nil
	}
	return params{l.Weight, l.Bias}.Params()
}

// Forward maps x [B, T, I/tp] ([B, T, I] with ScatterInput) to [B, T, O] ([B, T/tp, O]
// under sequence parallelism), bias added.
func (l *RowParallelLinear) Forward(p *Pass, x *tensor.Tensor) *tensor.Tensor {
	return sumBias(l.ForwardWithBias(p, x))
}

// ForwardWithBias is Forward returning the bias separately when built with SkipBiasAdd
// (nil otherwise, or without bias).
func (l *RowParallelLinear) ForwardWithBias(p *Pass, x *tensor.Tensor) (y, bias *tensor.Tensor) {
	x = l.scatter(p.Ctx, l.region.tp, x)     // [B, T, I/tp]
	y = p.Packed.MatMulT(x, l.Weight.Tensor) // [B, T, O], x·Wᵀ, partial sum
	y = l.region.fromRow(p, y)               // [B, T, O] ([B, T/tp, O] under SP)
	return l.bias(y, l.Bias)
}
