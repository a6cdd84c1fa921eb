package nn

import (
	"fmt"
	"math"

	"megago/parallel"
	"megago/tensor"
)

// CrossEntropyOptions configures VocabParallelCrossEntropy.
type CrossEntropyOptions struct {
	// Vocab is the true vocabulary size V: logit columns at or beyond it (the padding of
	// Vp) are excluded from the softmax, for parity with unpadded models. 0 means every
	// column counts.
	Vocab int
	// Ignore makes targets equal to IgnoreIndex contribute no loss and no gradient
	// (Hugging Face's -100).
	Ignore      bool
	IgnoreIndex int64
	// LabelSmoothing ε uses PyTorch's definition over the global vocabulary:
	// (1−ε)·(−log p_target) + ε·mean over the V classes of −log p. (Megatron's TP version
	// averages per partition and is wrong for TP > 1.)
	LabelSmoothing float64
	// GradInPlace makes the backward write the logits' gradient over the logits, saving
	// a logits-sized buffer at the peak of a training step's memory (PyTorch keeps both).
	// Set it only when nothing reads the logits after backward: the pass releases them
	// (tensor.GradOver) once done with their gradient, and using them afterwards panics.
	// The output layer's backward needs its input and weight, not the logits.
	GradInPlace bool
}

// VocabParallelCrossEntropy returns the per-token cross entropy [B, T] of logits
// [B, T, Vp/tp], this rank's slice of the vocabulary, against targets [B, T] (global ids).
// The softmax is taken over the whole vocabulary with all-reduces over the TP group, as
// Megatron does: the row maximum (MAX), then the sum of exponentials, the target logit
// (0 on ranks that do not own the target) and, for label smoothing, the sum of logits
// (one SUM). The per-row work runs in the device's fused kernels
// (tensor.Backend.VocabCrossEntropyStats, VocabCrossEntropyLoss and
// VocabCrossEntropyBackward): one pass over the logits forward, one backward writing the
// logits' gradient directly. F64 logits are computed in float64; F32 logits (BF16 and F16
// widened) in float32 with float64 row sums, the loss within about one float32 ulp (see
// the CPU backend's precision notes in tensor/cpu_ce.go). The result has the logits'
// dtype. Ignored tokens get loss 0 and no gradient. It panics if a target is outside
// [0, V) and not ignored.
func VocabParallelCrossEntropy(p *Pass, tp parallel.Comm, logits, targets *tensor.Tensor, o CrossEntropyOptions) *tensor.Tensor {
	f := newVocabCE(p, tp, logits, targets, o)
	return tensor.Apply("VocabParallelCrossEntropy", f, logits)[0]
}

// newVocabCE checks the arguments of VocabParallelCrossEntropy and returns its function.
func newVocabCE(p *Pass, tp parallel.Comm, logits, targets *tensor.Tensor, o CrossEntropyOptions) *vocabCE {
	shape := logits.Shape()
	if len(shape) < 1 || !targets.Shape().Equal(shape[:len(shape)-1]) {
		panic(fmt.Sprintf("nn: VocabParallelCrossEntropy: logits %v with targets %v", shape, targets.Shape()))
	}
	w := logits.Dim(-1)
	kp := tensor.VocabCrossEntropyParams{Start: tp.Rank() * w, Vocab: w * tp.Size(), Ignore: o.Ignore,
		IgnoreIndex: o.IgnoreIndex, LabelSmoothing: o.LabelSmoothing}
	if o.Vocab > 0 {
		kp.Vocab = o.Vocab
	}
	for i, t := range tensor.ToSlice[int64](targets) {
		if (t < 0 || t >= int64(kp.Vocab)) && !(o.Ignore && t == o.IgnoreIndex) {
			panic(fmt.Sprintf("nn: VocabParallelCrossEntropy: target %d at position %d outside [0, %d)", t, i, kp.Vocab))
		}
	}
	f := &vocabCE{p: p, tp: tp, kp: kp, targets: targets, inPlace: o.GradInPlace, combine: (*vocabCE).combineOverTP}
	if tp.Size() == 1 {
		f.combine = func(*vocabCE) {} // this rank's statistics are the global ones
	}
	return f
}

type vocabCE struct {
	p       *Pass
	tp      parallel.Comm
	kp      tensor.VocabCrossEntropyParams
	targets *tensor.Tensor   // [B, T]
	inPlace bool             // the backward overwrites the logits with their gradient
	combine func(f *vocabCE) // combineOverTP, or nothing at tp 1

	logits *tensor.Tensor // [B, T, Vp/tp]
	// stats holds each row's global statistics, F64 [4, B·T]: the maximum logit M,
	// Σ e^(x−M), the target's logit and Σ x, over the whole vocabulary.
	stats *tensor.Tensor
}

func (f *vocabCE) allReduce(t *tensor.Tensor, op parallel.Op) {
	if err := f.tp.AllReduce(f.p.Ctx, t, op); err != nil {
		panic(err)
	}
}

func (f *vocabCE) Forward(in []*tensor.Tensor) []*tensor.Tensor {
	x := in[0]
	f.logits = x
	dev := x.Device()
	f.stats = tensor.Empty(dev, tensor.F64, 4, x.Numel()/max(x.Dim(-1), 1))
	dev.Backend().VocabCrossEntropyStats(f.stats.Span(), x.Span(), f.targets.Span(), f.kp)
	f.combine(f)
	loss := tensor.Empty(dev, x.DType(), x.Shape()[:x.Rank()-1]...) // [B, T]
	dev.Backend().VocabCrossEntropyLoss(loss.Span(), f.stats.Span(), f.targets.Span(), f.kp)
	return []*tensor.Tensor{loss}
}

// combineOverTP turns this rank's statistics (over its own columns, Σ e^(x−m) relative to its
// own maximum m) into the global ones: M = MAX of the maxima, each rank's Σ e^(x−m)
// rescaled by e^(m−M), then one SUM of Σ e^(x−M), the target logit and Σ x.
func (f *vocabCE) combineOverTP() {
	m := f.stats.Narrow(0, 0, 1) // [1, N] views of stats
	s := f.stats.Narrow(0, 1, 1)
	local := m.Clone()
	f.allReduce(m, parallel.Max)
	scale := tensor.Exp(tensor.Sub(local, m))
	s.CopyFrom(tensor.Mul(s, scale))
	f.allReduce(f.stats.Narrow(0, 1, 3), parallel.Sum)
}

func (f *vocabCE) Backward(g []*tensor.Tensor) []*tensor.Tensor {
	x := f.logits
	var dx *tensor.Tensor // [B, T, Vp/tp]
	if f.inPlace {
		dx = tensor.GradOver(x) // released by the pass once the output layer's backward has run
	} else {
		dx = tensor.Empty(x.Device(), x.DType(), x.Shape()...)
	}
	x.Device().Backend().VocabCrossEntropyBackward(dx.Span(), x.Span(), f.targets.Span(), f.stats.Span(),
		g[0].Span(), f.kp)
	return []*tensor.Tensor{dx}
}

// MeanLoss averages per-token losses [B, T] over the tokens whose target is not ignored
// (those with mask 1 when mask is given, a [B, T] tensor of 0/1 in the losses' dtype).
func MeanLoss(losses, mask *tensor.Tensor) *tensor.Tensor {
	if mask == nil {
		return tensor.Mean(losses)
	}
	n := tensor.Sum(mask).Item()
	return tensor.Scale(tensor.Sum(tensor.Mul(losses, mask)), 1/math.Max(n, 1))
}
