package nn

import (
	"fmt"

	"megago/parallel"
	"megago/tensor"
)

// ColumnParallelLinear is y = x·Wᵀ + b with W [O, I] split by output rows over the TP
// group: rank r owns rows [r·O/tp, (r+1)·O/tp) and the matching bias. Its input goes
// through CopyToTP (or GatherFromSP under sequence parallelism); its output is this rank's
// slice of the features, [B, T, O/tp], unless GatherOutput all-gathers it to [B, T, O].
// With a TP group of size 1 it is a plain linear layer.
type ColumnParallelLinear struct {
	Weight *Param // [O/tp, I]
	Bias   *Param // [O/tp], nil without bias

	// GatherOutput all-gathers the output features (Megatron's gather_output).
	GatherOutput bool
	// SkipBiasAdd returns the output without the bias, for the caller to fuse it later
	// (Megatron's skip_bias_add); ForwardWithBias returns both. It has no effect with
	// GatherOutput: this rank's bias slice is added before the gather.
	SkipBiasAdd bool

	tp parallel.Comm
	sp bool
}

// LinearOptions configures a linear layer.
type LinearOptions struct {
	Bias bool
	Init Init // of the weight; biases start at zero
}

// NewColumnParallelLinear creates the layer's parameters name.weight and name.bias. It
// panics if out is not divisible by the TP size.
func NewColumnParallelLinear(b *Builder, name string, in, out int, o LinearOptions) *ColumnParallelLinear {
	if out%b.TP.Size() != 0 {
		panic(fmt.Sprintf("nn: ColumnParallelLinear %s: out features %d not divisible by tp %d", name, out, b.TP.Size()))
	}
	l := &ColumnParallelLinear{tp: b.TP, sp: b.SequenceParallel}
	l.Weight = newParam(b, name+".weight", tensor.Shape{out, in}, 0, o.Init)
	if o.Bias {
		l.Bias = newParam(b, name+".bias", tensor.Shape{out}, 0, Constant(0))
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
// ([B, T, O] with GatherOutput). With SkipBiasAdd the bias is not added.
func (l *ColumnParallelLinear) Forward(p *Pass, x *tensor.Tensor) *tensor.Tensor {
	y, bias := l.ForwardWithBias(p, x)
	if bias != nil {
		y = tensor.Add(y, bias)
	}
	return y
}

// ForwardWithBias is Forward returning the bias separately when SkipBiasAdd is set (nil
// otherwise, or without bias).
func (l *ColumnParallelLinear) ForwardWithBias(p *Pass, x *tensor.Tensor) (y, bias *tensor.Tensor) {
	if l.sp {
		x = parallel.GatherFromSP(p.Ctx, l.tp, x) // [B, T, I]
	} else {
		x = parallel.CopyToTP(p.Ctx, l.tp, x)
	}
	y = tensor.MatMulT(x, l.Weight.Tensor, false, true) // [B, T, O/tp]
	if l.Bias != nil {
		if l.SkipBiasAdd && !l.GatherOutput {
			bias = l.Bias.Tensor
		} else {
			y = tensor.Add(y, l.Bias.Tensor)
		}
	}
	if l.GatherOutput {
		y = parallel.GatherFromTP(p.Ctx, l.tp, y) // [B, T, O]
	}
	return y, bias
}

// RowParallelLinear is y = x·Wᵀ + b with W [O, I] split by input columns over the TP
// group: rank r owns columns [r·I/tp, (r+1)·I/tp). Its input is this rank's slice of the
// features, [B, T, I/tp] (InputIsParallel, the usual case after a column-parallel layer)
// or the whole [B, T, I], which it scatters. The partial products are summed by
// ReduceFromTP (or ReduceScatterToSP under sequence parallelism, giving [B, T/tp, O]) and
// the bias, which is not split, is added after the reduction.
type RowParallelLinear struct {
	Weight *Param // [O, I/tp]
	Bias   *Param // [O], replicated; nil without bias

	// InputIsParallel takes input already split over TP (Megatron's input_is_parallel).
	InputIsParallel bool
	// SkipBiasAdd returns the output without the bias (see ForwardWithBias).
	SkipBiasAdd bool

	tp parallel.Comm
	sp bool
}

// NewRowParallelLinear creates the layer's parameters; InputIsParallel starts true. It
// panics if in is not divisible by the TP size.
func NewRowParallelLinear(b *Builder, name string, in, out int, o LinearOptions) *RowParallelLinear {
	if in%b.TP.Size() != 0 {
		panic(fmt.Sprintf("nn: RowParallelLinear %s: in features %d not divisible by tp %d", name, in, b.TP.Size()))
	}
	l := &RowParallelLinear{tp: b.TP, sp: b.SequenceParallel, InputIsParallel: true}
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

// Forward maps x [B, T, I/tp] to [B, T, O] ([B, T/tp, O] under sequence parallelism).
func (l *RowParallelLinear) Forward(p *Pass, x *tensor.Tensor) *tensor.Tensor {
	y, bias := l.ForwardWithBias(p, x)
	if bias != nil {
		y = tensor.Add(y, bias)
	}
	return y
}

// ForwardWithBias is Forward returning the bias separately when SkipBiasAdd is set.
func (l *RowParallelLinear) ForwardWithBias(p *Pass, x *tensor.Tensor) (y, bias *tensor.Tensor) {
	if !l.InputIsParallel {
		x = parallel.ScatterToTP(p.Ctx, l.tp, x) // [B, T, I/tp]
	}
	y = tensor.MatMulT(x, l.Weight.Tensor, false, true) // [B, T, O], partial sum
	if l.sp {
		y = parallel.ReduceScatterToSP(p.Ctx, l.tp, y) // [B, T/tp, O]
	} else {
		y = parallel.ReduceFromTP(p.Ctx, l.tp, y)
	}
	if l.Bias != nil {
		if l.SkipBiasAdd {
			return y, l.Bias.Tensor
		}
		y = tensor.Add(y, l.Bias.Tensor)
	}
	return y, nil
}
