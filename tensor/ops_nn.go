package tensor

import (
	"fmt"
	"math"
)

// SoftmaxOptions fuses scaling and masking into Softmax and LogSoftmax.
type SoftmaxOptions struct {
	// Scale multiplies the input before the softmax; 0 means 1.
	Scale float64
	// Causal masks key j for query i when j > i + Tk − Tq, where the input is [..., Tq, Tk]
	// (so the last query of a longer key sequence sees every key).
	Causal bool
	// Mask, if not nil, broadcasts to the input's shape; positions where it is non-zero are
	// masked (Megatron's convention: true means "do not attend"), e.g. padding [B, 1, 1, Tk].
	Mask *Tensor
}

// Softmax returns softmax over the last dim of Scale·x with masked positions excluded.
// A row with every position masked is all zeros (PyTorch would give NaN).
func Softmax(x *Tensor, o SoftmaxOptions) *Tensor { return softmax("Softmax", x, o, false) }

// LogSoftmax returns log-softmax over the last dim; masked positions are −∞ and get no
// gradient.
func LogSoftmax(x *Tensor, o SoftmaxOptions) *Tensor { return softmax("LogSoftmax", x, o, true) }

func softmax(name string, x *Tensor, o SoftmaxOptions, log bool) *Tensor {
	if len(x.shape) == 0 {
		panic(fmt.Sprintf("tensor: %s: input is a scalar", name))
	}
	p := SoftmaxParams{Scale: o.Scale, Causal: o.Causal, Log: log}
	if p.Scale == 0 {
		p.Scale = 1
	}
	var mask Span
	if o.Mask != nil {
		if b, ok := Broadcast(o.Mask.shape, x.shape); !ok || !b.Equal(x.shape) {
			panic(fmt.Sprintf("tensor: %s: mask %v does not broadcast to input %v", name, o.Mask.shape, x.shape))
		}
		mask = o.Mask.Span()
	}
	y := empty(x.Device(), x.dtype, x.shape)
	x.Device().backend.Softmax(y.Span(), x.Span(), mask, p)
	return record1(name, y, []*Tensor{x}, func(gy *Tensor) []*Tensor {
		dx := empty(gy.Device(), x.dtype, x.shape)
		gy.Device().backend.SoftmaxBackward(dx.Span(), y.Span(), gy.Span(), p)
		return []*Tensor{dx}
	})
}

// normStatsType is the dtype of LayerNorm's saved mean and rstd.
func normStatsType(dt DType) DType { return dt.Compute() }

func checkNormWeight(op string, x, w *Tensor) {
	c := x.shape[len(x.shape)-1]
	if w != nil && (len(w.shape) != 1 || w.shape[0] != c || w.dtype != x.dtype) {
		panic(fmt.Sprintf("tensor: %s: weight %v %v for input %v %v", op, w.dtype, w.shape, x.dtype, x.shape))
	}
}

func spanOrEmpty(t *Tensor) Span {
	if t == nil {
		return Span{}
	}
	return t.Span()
}

// LayerNorm normalizes x over its last dim C: (x − mean)/√(var + eps)·w + b, with the biased
// variance, as torch.nn.LayerNorm. w and b ([C]) may be nil. Forward and backward are each
// one fused kernel.
func LayerNorm(x, w, b *Tensor, eps float64) *Tensor {
	if len(x.shape) == 0 {
		panic("tensor: LayerNorm: input is a scalar")
	}
	checkNormWeight("LayerNorm", x, w)
	checkNormWeight("LayerNorm", x, b)
	rows := x.Numel() / max(1, x.shape[len(x.shape)-1])
	dev := x.Device()
	y := empty(dev, x.dtype, x.shape)
	mean := empty(dev, normStatsType(x.dtype), Shape{rows})
	rstd := empty(dev, normStatsType(x.dtype), Shape{rows})
	dev.backend.LayerNorm(y.Span(), mean.Span(), rstd.Span(), x.Span(), spanOrEmpty(w), spanOrEmpty(b), eps)
	return record1("LayerNorm", y, []*Tensor{x, w, b}, func(gy *Tensor) []*Tensor {
		dx := empty(dev, x.dtype, x.shape)
		var dw, db *Tensor
		if needsGrad(w) {
			dw = empty(dev, w.dtype, w.shape)
		}
		if needsGrad(b) {
			db = empty(dev, b.dtype, b.shape)
		}
		dev.backend.LayerNormBackward(dx.Span(), spanOrEmpty(dw), spanOrEmpty(db), gy.Span(), x.Span(), spanOrEmpty(w), mean.Span(), rstd.Span())
		return []*Tensor{dx, dw, db}
	})
}

// RMSNorm scales x by the reciprocal root mean square of its last dim: x/√(mean(x²) + eps)·w,
// as Llama's RMSNorm. w ([C]) may be nil.
func RMSNorm(x, w *Tensor, eps float64) *Tensor {
	if len(x.shape) == 0 {
		panic("tensor: RMSNorm: input is a scalar")
	}
	checkNormWeight("RMSNorm", x, w)
	rows := x.Numel() / max(1, x.shape[len(x.shape)-1])
	dev := x.Device()
	y := empty(dev, x.dtype, x.shape)
	rstd := empty(dev, normStatsType(x.dtype), Shape{rows})
	dev.backend.RMSNorm(y.Span(), rstd.Span(), x.Span(), spanOrEmpty(w), eps)
	return record1("RMSNorm", y, []*Tensor{x, w}, func(gy *Tensor) []*Tensor {
		dx := empty(dev, x.dtype, x.shape)
		var dw *Tensor
		if needsGrad(w) {
			dw = empty(dev, w.dtype, w.shape)
		}
		dev.backend.RMSNormBackward(dx.Span(), spanOrEmpty(dw), gy.Span(), x.Span(), spanOrEmpty(w), rstd.Span())
		return []*Tensor{dx, dw}
	})
}

// Embedding looks up rows of weight [V, C] at ids (I32 or I64, any shape) and returns
// [ids..., C]. The gradient is scattered back into weight with addition. It panics if an id
// is outside [0, V).
func Embedding(weight, ids *Tensor) *Tensor {
	if len(weight.shape) != 2 || (ids.dtype != I32 && ids.dtype != I64) {
		panic(fmt.Sprintf("tensor: Embedding: weight %v with ids %v %v", weight.shape, ids.dtype, ids.shape))
	}
	dev := weight.Device()
	out := empty(dev, weight.dtype, append(ids.shape.Clone(), weight.shape[1]))
	dev.backend.Embedding(out.Span(), weight.Span(), ids.Span())
	return record1("Embedding", out, []*Tensor{weight}, func(gy *Tensor) []*Tensor {
		if directLeafGrad(weight) { // add the rows into the weight's gradient itself
			sink, overwrite := leafGradSink(weight)
			if overwrite {
				dev.backend.Fill(sink.Span(), 0)
			}
			dev.backend.EmbeddingBackward(sink.Span(), gy.Span(), ids.Span())
			return []*Tensor{gradAccumulated}
		}
		dw := Zeros(dev, weight.dtype, weight.shape...)
		dev.backend.EmbeddingBackward(dw.Span(), gy.Span(), ids.Span())
		return []*Tensor{dw}
	})
}

// Reduction says how per-element losses are combined.
type Reduction uint8

// Reductions. The zero value is ReduceMeanLoss.
const (
	ReduceMeanLoss Reduction = iota // mean over the elements that are not ignored
	ReduceSumLoss                   // sum
	ReduceNone                      // per-element losses, shaped like the targets
)

// CrossEntropyOptions configures CrossEntropy. The zero value ignores no target, applies
// no label smoothing and averages.
type CrossEntropyOptions struct {
	// Ignore makes targets equal to IgnoreIndex contribute no loss and no gradient
	// (PyTorch's ignore_index; its default value there is -100).
	Ignore      bool
	IgnoreIndex int64
	// LabelSmoothing ε mixes the one-hot target with the uniform distribution over the V
	// classes as PyTorch defines it: loss = (1−ε)·nll + ε·mean over classes of −log p.
	LabelSmoothing float64
	Reduction      Reduction
}

// CrossEntropy returns the cross entropy of logits [..., V] against integer targets [...]
// (log-softmax and negative log-likelihood fused, accumulated in float64 per row). With
// ReduceMeanLoss it averages over non-ignored targets (0 when all are ignored). It panics
// if a target is outside [0, V) and not ignored.
func CrossEntropy(logits, targets *Tensor, o CrossEntropyOptions) *Tensor {
	if len(logits.shape) == 0 || (targets.dtype != I32 && targets.dtype != I64) ||
		!targets.shape.Equal(logits.shape[:len(logits.shape)-1]) {
		panic(fmt.Sprintf("tensor: CrossEntropy: logits %v with targets %v %v", logits.shape, targets.dtype, targets.shape))
	}
	v := logits.shape[len(logits.shape)-1]
	n := targets.Numel()
	dev := logits.Device()
	l2 := logits.Detach().Reshape(n, v)
	t1 := targets.Detach().Reshape(n)
	p := CrossEntropyParams{Ignore: o.Ignore, IgnoreIndex: o.IgnoreIndex, LabelSmoothing: o.LabelSmoothing}
	loss := empty(dev, logits.dtype, Shape{n})
	lse := empty(dev, logits.dtype.Compute(), Shape{n})
	dev.backend.CrossEntropy(loss.Span(), lse.Span(), l2.Span(), t1.Span(), p)
	perRow := record1("CrossEntropy", loss, []*Tensor{logits}, func(gy *Tensor) []*Tensor {
		dx := empty(dev, logits.dtype, logits.shape)
		dev.backend.CrossEntropyBackward(dx.Span(), l2.Span(), t1.Span(), lse.Span(), gy.Span(), p)
		return []*Tensor{dx}
	})
	switch o.Reduction {
	case ReduceNone:
		return perRow.Reshape(targets.shape...)
	case ReduceSumLoss:
		return Sum(perRow)
	}
	count := n
	if o.Ignore {
		count = 0
		for _, t := range ToSlice[int64](t1) {
			if t != o.IgnoreIndex {
				count++
			}
		}
	}
	return Scale(Sum(perRow), 1/float64(max(count, 1)))
}

// Where returns cond ≠ 0 ? a : b elementwise, all three broadcast together; cond may have
// any dtype. Gradients flow to a where cond holds and to b elsewhere.
func Where(cond, a, b *Tensor) *Tensor {
	checkSame("Where", a, b)
	s, ok := Broadcast(a.shape, b.shape)
	if ok {
		s, ok = Broadcast(s, cond.shape)
	}
	if !ok {
		panic(fmt.Sprintf("tensor: Where: cond %v, a %v, b %v do not broadcast", cond.shape, a.shape, b.shape))
	}
	dev := a.Device()
	out := empty(dev, a.dtype, s)
	dev.backend.Where(out.Span(), cond.Span(), a.Span(), b.Span())
	return record1("Where", out, []*Tensor{a, b}, func(gy *Tensor) []*Tensor {
		zero := Scalar(dev, gy.dtype, 0)
		var ga, gb *Tensor
		if needsGrad(a) {
			ga = sumTo(Where(cond, gy, zero), a.shape)
		}
		if needsGrad(b) {
			gb = sumTo(Where(cond, zero, gy), b.shape)
		}
		return []*Tensor{ga, gb}
	})
}

// MaskedFill returns x with value where mask (broadcast to x) is non-zero.
func MaskedFill(x, mask *Tensor, value float64) *Tensor {
	if b, ok := Broadcast(mask.shape, x.shape); !ok || !b.Equal(x.shape) {
		panic(fmt.Sprintf("tensor: MaskedFill: mask %v does not broadcast to %v", mask.shape, x.shape))
	}
	return Where(mask, Scalar(x.Device(), x.dtype, value), x)
}

// Dropout zeroes each element of x with probability p and scales the rest by 1/(1−p).
// The mask comes from rng at each element's index in x, so x is taken to be the whole
// tensor; use DropoutRegion for a shard. p = 0 returns x.
func Dropout(x *Tensor, p float64, rng RNG) *Tensor {
	return DropoutRegion(x, p, rng, x.shape, make([]int, len(x.shape)))
}

// DropoutRegion is Dropout for x holding the region of a full tensor of shape full that
// starts at start: each element gets the mask value of the same element of the full tensor,
// so a sharded (TP, SP) computation drops exactly what the unsharded one drops.
func DropoutRegion(x *Tensor, p float64, rng RNG, full Shape, start []int) *Tensor {
	if p < 0 || p >= 1 || math.IsNaN(p) {
		panic(fmt.Sprintf("tensor: Dropout: probability %v outside [0, 1)", p))
	}
	if p == 0 {
		return x
	}
	mask := Random(x.Device(), x.dtype, rng, DistDropout, p, 0, Region{Full: full, Start: start, Size: x.shape})
	return Mul(x, mask)
}
