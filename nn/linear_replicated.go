package nn

import "megago/tensor"

// Linear is a plain y = x·Wᵀ + b whose parameters every TP rank holds whole (BERT's pooler,
// MLM transform and binary head): each rank computes the same thing, so nothing is
// communicated. Under sequence parallelism a Linear applied to a rank's part of the
// sequence gets only that part's gradient: NewLinear marks its parameters SequenceParallel
// when the Builder's SequenceParallel is set (see ReduceSequenceParallelGrads), so build a
// Linear whose input is whole on every rank with a Builder that has it unset.
type Linear struct {
	Weight *Param // [O, I]
	Bias   *Param // [O]; nil without bias
}

// NewLinear creates name.weight [out, in] and, with o.Bias, name.bias [out] (zeros),
// replicated over TP. It panics if o selects a parallel layer's variant (GatherOutput,
// SkipBiasAdd, ScatterInput).
func NewLinear(b *Builder, name string, in, out int, o LinearOptions) *Linear {
	checkLinearOptions("Linear", name, o, false, false, false)
	l := &Linear{Weight: newParam(b, name+".weight", tensor.Shape{out, in}, -1, o.Init)}
	l.Weight.SequenceParallel = b.SequenceParallel
	if o.Bias {
		l.Bias = newParam(b, name+".bias", tensor.Shape{out}, -1, Constant(0))
		l.Bias.SequenceParallel = b.SequenceParallel
	}
	return l
}

// Params returns the weight and bias.
func (l *Linear) Params() []*Param {
	if l == nil {
		return nil
	}
	return params{l.Weight, l.Bias}.Params()
}

// Forward maps x [..., I] to [..., O].
func (l *Linear) Forward(x *tensor.Tensor) *tensor.Tensor {
	y, _ := addBias(tensor.MatMulT(x, l.Weight.Tensor, false, true), l.Bias) // [..., O]
	return y
}
