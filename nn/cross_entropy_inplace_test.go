package nn

import (
	"context"
	"fmt"
	"math"
	"testing"

	"megago/parallel"
	"megago/tensor"
)

// TestVocabParallelCrossEntropyGradInPlace checks that writing the gradient over the
// logits gives, bit for bit, the gradient of the out-of-place backward (checked against
// the reference in TestVocabParallelCrossEntropyMatchesCrossEntropy), with F32 rows wide
// enough for the assembly blocks, padding, ignored targets and label smoothing, and that
// backward then releases the logits.
func TestVocabParallelCrossEntropyGradInPlace(t *testing.T) {
	const b, tt, w, vocab = 2, 3, 600, 590
	logits, targets := ceProblem(b, tt, w, vocab, true)
	g := seqValues(b*tt, 25)
	for _, dt := range []tensor.DType{tensor.F64, tensor.F32, tensor.BF16} {
		for _, tp := range []int{1, 2} {
			t.Run(fmt.Sprintf("%v/tp%d", dt, tp), func(t *testing.T) {
				onRanks(t, tp, func(c parallel.Comm, dev *tensor.Device) (struct{}, error) {
					lo, width := c.Rank()*w/tp, w/tp
					grad := func(inPlace bool) []float64 {
						o := CrossEntropyOptions{Vocab: vocab, Ignore: true, IgnoreIndex: -100, LabelSmoothing: 0.1, GradInPlace: inPlace}
						x := tensor.FromSlice(dev, cols(logits, w, lo, width), b, tt, width).Cast(dt).SetRequiresGrad(true)
						h := tensor.Scale(x, 1) // the op's output, as the output layer's logits are
						loss := VocabParallelCrossEntropy(Eval(context.Background()), c, h, tensor.FromSlice(dev, targets, b, tt), o)
						tensor.Sum(tensor.Mul(loss, tensor.FromSlice(dev, g, b, tt).Cast(dt))).Backward()
						if h.Released() != inPlace {
							t.Errorf("rank %d: GradInPlace %v: logits released by backward: %v", c.Rank(), inPlace, h.Released())
						}
						return tensor.ToSlice[float64](x.Grad())
					}
					want, got := grad(false), grad(true)
					for i := range want {
						if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
							t.Errorf("rank %d element %d: in-place gradient %v, out of place %v", c.Rank(), i, got[i], want[i])
							break
						}
					}
					return struct{}{}, nil
				})
			})
		}
	}
}
