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
}

// VocabParallelCrossEntropy returns the per-token cross entropy [B, T] of logits
// [B, T, Vp/tp], this rank's slice of the vocabulary, against targets [B, T] (global ids).
// The softmax is taken over the whole vocabulary with three all-reduces over the TP group,
// as Megatron does: the row maximum (MAX), then the sum of exponentials, the target logit
// (0 on ranks that do not own the target) and, for label smoothing, the sum of logits
// (one SUM). Arithmetic is in float64; the result has the logits' dtype. Ignored tokens
// get loss 0. It panics if a target is outside [0, V) and not ignored.
func VocabParallelCrossEntropy(p *Pass, tp parallel.Comm, logits, targets *tensor.Tensor, o CrossEntropyOptions) *tensor.Tensor {
	shape := logits.Shape()
	if len(shape) < 1 || !targets.Shape().Equal(shape[:len(shape)-1]) {
		panic(fmt.Sprintf("nn: VocabParallelCrossEntropy: logits %v with targets %v", shape, targets.Shape()))
	}
	f := &vocabCE{p: p, tp: tp, o: o, targets: tensor.ToSlice[int64](targets)}
	return tensor.Apply("VocabParallelCrossEntropy", f, logits)[0]
}

type vocabCE struct {
	p       *Pass
	tp      parallel.Comm
	o       CrossEntropyOptions
	targets []int64

	logits    *tensor.Tensor
	x         []float64 // local logits, [N, W]
	max, sexp []float64 // per row, global
}

// columns returns the global vocabulary size and this rank's first column and width.
func (f *vocabCE) columns() (v, start, w int) {
	w = f.logits.Dim(-1)
	start = f.tp.Rank() * w
	v = w * f.tp.Size()
	if f.o.Vocab > 0 {
		v = f.o.Vocab
	}
	return v, start, w
}

func (f *vocabCE) ignored(t int64) bool { return f.o.Ignore && t == f.o.IgnoreIndex }

func (f *vocabCE) allReduce(v []float64, op parallel.Op) {
	if f.tp.Size() == 1 {
		return
	}
	t := tensor.FromSlice(f.logits.Device(), v)
	if err := f.tp.AllReduce(f.p.Ctx, t, op); err != nil {
		panic(err)
	}
	copy(v, tensor.ToSlice[float64](t))
}

func (f *vocabCE) Forward(in []*tensor.Tensor) []*tensor.Tensor {
	f.logits = in[0]
	f.x = tensor.ToSlice[float64](in[0])
	v, start, w := f.columns()
	n := len(f.targets)
	local := max(0, min(w, v-start)) // columns of this rank inside the true vocabulary
	f.max = make([]float64, n)
	for i := range f.max {
		m := math.Inf(-1)
		for _, x := range f.x[i*w : i*w+local] {
			m = max(m, x)
		}
		f.max[i] = m
	}
	f.allReduce(f.max, parallel.Max)
	sums := make([]float64, 3*n) // Σ exp, target logit, Σ logits; all relative to the max
	for i, t := range f.targets {
		if f.ignored(t) {
			continue
		}
		if t < 0 || t >= int64(v) {
			panic(fmt.Sprintf("nn: VocabParallelCrossEntropy: target %d at position %d outside [0, %d)", t, i, v))
		}
		row := f.x[i*w : i*w+local]
		for _, x := range row {
			sums[i] += math.Exp(x - f.max[i])
			sums[2*n+i] += x - f.max[i]
		}
		if c := int(t) - start; c >= 0 && c < local {
			sums[n+i] = row[c] - f.max[i]
		}
	}
	f.allReduce(sums, parallel.Sum)
	f.sexp = sums[:n]
	eps := f.o.LabelSmoothing
	loss := make([]float64, n)
	for i, t := range f.targets {
		if f.ignored(t) {
			continue
		}
		lse := math.Log(f.sexp[i])
		loss[i] = (1-eps)*(lse-sums[n+i]) + eps*(lse-sums[2*n+i]/float64(v))
	}
	out := tensor.FromSlice(in[0].Device(), loss, in[0].Shape()[:in[0].Rank()-1]...)
	return []*tensor.Tensor{out.Cast(in[0].DType())}
}

func (f *vocabCE) Backward(g []*tensor.Tensor) []*tensor.Tensor {
	gl := tensor.ToSlice[float64](g[0])
	v, start, w := f.columns()
	local := max(0, min(w, v-start))
	eps := f.o.LabelSmoothing
	dx := make([]float64, len(f.x))
	for i, t := range f.targets {
		if f.ignored(t) {
			continue
		}
		row, drow := f.x[i*w:i*w+local], dx[i*w:i*w+local]
		for j, x := range row {
			q := math.Exp(x-f.max[i])/f.sexp[i] - eps/float64(v)
			if int64(start+j) == t {
				q -= 1 - eps
			}
			drow[j] = gl[i] * q
		}
	}
	d := tensor.FromSlice(f.logits.Device(), dx, f.logits.Shape()...).Cast(f.logits.DType())
	return []*tensor.Tensor{d}
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
