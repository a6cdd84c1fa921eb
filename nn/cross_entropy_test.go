package nn

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"megago/parallel"
	"megago/tensor"
)

// megatronCheckLogits returns one rank's logits for Megatron's check value: 16 rows, each
// 0..7 repeated to width 32 (so global column c holds c mod 8 on every rank).
func megatronCheckLogits(dev *tensor.Device) *tensor.Tensor {
	const rows, width = 16, 32
	v := make([]float32, rows*width)
	for i := range v {
		v[i] = float32(i % width % 8)
	}
	return tensor.FromSlice(dev, v, rows, width)
}

func TestVocabParallelCrossEntropyMegatronCheckValue(t *testing.T) {
	// tensor_parallel tests: TP=4, global V=128, loss of row i = 10.2309 − (target_i mod 8)
	// (log Σ over 16 copies of e^0..e^7 = 10.2309), given to 4 decimals.
	const tp, rows, checkTol = 4, 16, 5e-5
	for name, target := range map[string]func(i int) int64{
		"megatron targets 0,2,...,30 (rank 0)": func(i int) int64 { return int64(2 * i) },
		"targets owned by every rank":          func(i int) int64 { return int64(8*i + i%8) }, // rank i/4
	} {
		t.Run(name, func(t *testing.T) {
			targets, want := make([]int64, rows), make([]float64, rows)
			for i := range targets {
				targets[i] = target(i)
				want[i] = 10.2309 - float64(targets[i]%8)
			}
			onRanks(t, tp, func(c parallel.Comm, dev *tensor.Device) (struct{}, error) {
				loss := VocabParallelCrossEntropy(Eval(context.Background()), c, megatronCheckLogits(dev),
					tensor.FromSlice(dev, targets, rows), CrossEntropyOptions{})
				if loss.DType() != tensor.F32 {
					t.Errorf("rank %d: loss dtype %v, want the logits' F32", c.Rank(), loss.DType())
				}
				assertInDeltaSlice(t, want, tensor.ToSlice[float64](loss), checkTol, fmt.Sprintf("rank %d", c.Rank()))
				return struct{}{}, nil
			})
		})
	}
}

// ceCase is a vocab-parallel cross-entropy problem: logits [B, T, width·tp] of which the
// first vocab columns are the true vocabulary.
type ceCase struct {
	name   string
	vocab  int // 0: every column
	eps    float64
	ignore bool
}

// ceProblem returns global logits [B, T, W] and targets [B, T] (some −100 when ignore).
func ceProblem(b, tt, w, vocab int, ignore bool) (logits []float64, targets []int64) {
	logits = seqValues(b*tt*w, 21)
	for i := range logits {
		logits[i] *= 4 // spread the softmax
	}
	targets = make([]int64, b*tt)
	for i := range targets {
		targets[i] = int64((i*37 + 5) % vocab)
		if ignore && i%4 == 1 {
			targets[i] = -100
		}
	}
	return logits, targets
}

// ceReference returns tensor.CrossEntropy's per-token losses and the gradient of Σ g·loss
// with respect to the global logits [B, T, W] (zero in the padded columns).
func ceReference(logits []float64, targets []int64, b, tt, w, vocab int, g []float64, o CrossEntropyOptions) (loss, grad []float64) {
	dev := tensor.NewCPU()
	x := tensor.FromSlice(dev, cols(logits, w, 0, vocab), b, tt, vocab).SetRequiresGrad(true)
	l := tensor.CrossEntropy(x, tensor.FromSlice(dev, targets, b, tt), tensor.CrossEntropyOptions{
		Ignore: o.Ignore, IgnoreIndex: o.IgnoreIndex, LabelSmoothing: o.LabelSmoothing, Reduction: tensor.ReduceNone})
	tensor.Sum(tensor.Mul(l, tensor.FromSlice(dev, g, b, tt))).Backward()
	gv := tensor.ToSlice[float64](x.Grad())
	grad = make([]float64, len(logits))
	for i := 0; i < b*tt; i++ {
		copy(grad[i*w:], gv[i*vocab:(i+1)*vocab])
	}
	return tensor.ToSlice[float64](l), grad
}

func TestVocabParallelCrossEntropyMatchesCrossEntropy(t *testing.T) {
	const b, tt, w = 2, 5, 32 // w is the global (padded) width
	cases := []ceCase{
		{"plain", 0, 0, false},
		{"label smoothing", 0, 0.1, false},
		{"ignore index", 0, 0, true},
		{"padded vocab", 29, 0, false},
		{"padded vocab, a rank with no true column", 20, 0, false}, // tp 4: rank 3 holds 24..31
		{"everything", 21, 0.2, true},
	}
	for _, tc := range cases {
		vocab := tc.vocab
		if vocab == 0 {
			vocab = w
		}
		logits, targets := ceProblem(b, tt, w, vocab, tc.ignore)
		g := seqValues(b*tt, 22)
		o := CrossEntropyOptions{Vocab: tc.vocab, Ignore: tc.ignore, IgnoreIndex: -100, LabelSmoothing: tc.eps}
		wantLoss, wantGrad := ceReference(logits, targets, b, tt, w, vocab, g, o)
		for _, tp := range []int{1, 2, 4} {
			t.Run(fmt.Sprintf("%s/tp%d", tc.name, tp), func(t *testing.T) {
				onRanks(t, tp, func(c parallel.Comm, dev *tensor.Device) (struct{}, error) {
					lo, width := c.Rank()*w/tp, w/tp
					x := tensor.FromSlice(dev, cols(logits, w, lo, width), b, tt, width).SetRequiresGrad(true)
					loss := VocabParallelCrossEntropy(Eval(context.Background()), c, x, tensor.FromSlice(dev, targets, b, tt), o)
					// The all-reduces add the per-rank partial sums in another order.
					const tol = 1e-13
					assertInDeltaSlice(t, wantLoss, tensor.ToSlice[float64](loss), tol, fmt.Sprintf("rank %d loss", c.Rank()))
					tensor.Sum(tensor.Mul(loss, tensor.FromSlice(dev, g, b, tt))).Backward()
					assertInDeltaSlice(t, cols(wantGrad, w, lo, width), tensor.ToSlice[float64](x.Grad()), tol,
						fmt.Sprintf("rank %d gradient", c.Rank()))
					return struct{}{}, nil
				})
			})
		}
	}
}

func TestVocabParallelCrossEntropyFiniteDifferences(t *testing.T) {
	// Central differences of L = Σ g·loss at TP=2 in float64, with label smoothing, an
	// ignored target and padded columns (which must get exactly zero gradient).
	const b, tt, w, vocab, tp = 2, 3, 16, 13, 2
	const h = 1e-6
	const tol = 1e-8 // O(h²) truncation plus rounding of about 1e-16/h
	logits, targets := ceProblem(b, tt, w, vocab, true)
	g := seqValues(b*tt, 23)
	o := CrossEntropyOptions{Vocab: vocab, Ignore: true, IgnoreIndex: -100, LabelSmoothing: 0.1}
	onRanks(t, tp, func(c parallel.Comm, dev *tensor.Device) (struct{}, error) {
		p := Eval(context.Background())
		lo, width := c.Rank()*w/tp, w/tp
		local := cols(logits, w, lo, width)
		weights, tg := tensor.FromSlice(dev, g, b, tt), tensor.FromSlice(dev, targets, b, tt)
		lossOf := func(x *tensor.Tensor) *tensor.Tensor {
			return tensor.Sum(tensor.Mul(VocabParallelCrossEntropy(p, c, x, tg, o), weights))
		}
		x := tensor.FromSlice(dev, local, b, tt, width).SetRequiresGrad(true)
		lossOf(x).Backward()
		analytic := tensor.ToSlice[float64](x.Grad())
		// Every rank runs every forward (they are collective); the owner of column j
		// perturbs it.
		dev.NoGrad(func() {
			for row := 0; row < b*tt; row++ {
				for j := 0; j < w; j++ {
					owner := j / width
					at := func(d float64) float64 {
						v := append([]float64(nil), local...)
						if owner == c.Rank() {
							v[row*width+j-lo] += d
						}
						return lossOf(tensor.FromSlice(dev, v, b, tt, width)).Item()
					}
					numeric := (at(h) - at(-h)) / (2 * h)
					if owner != c.Rank() {
						continue
					}
					got := analytic[row*width+j-lo]
					if j >= vocab && got != 0 {
						t.Errorf("row %d padded column %d: gradient %v, want 0", row, j, got)
					}
					if d := got - numeric; d > tol || d < -tol {
						t.Errorf("row %d column %d: analytic %v, numeric %v", row, j, got, numeric)
					}
				}
			}
		})
		return struct{}{}, nil
	})
}

func TestVocabParallelCrossEntropyRejectsBadTargets(t *testing.T) {
	dev := tensor.NewCPU()
	logits := tensor.Zeros(dev, tensor.F64, 1, 2, 8)
	for name, tc := range map[string]struct {
		targets []int64
		o       CrossEntropyOptions
		want    string
	}{
		"beyond vocab": {[]int64{1, 6}, CrossEntropyOptions{Vocab: 6}, "target 6 at position 1 outside [0, 6)"},
		"negative":     {[]int64{-1, 0}, CrossEntropyOptions{}, "target -1 at position 0 outside [0, 8)"},
		"not ignored":  {[]int64{-100, 0}, CrossEntropyOptions{IgnoreIndex: -100}, "target -100 at position 0 outside [0, 8)"},
	} {
		require.PanicsWithValue(t, "nn: VocabParallelCrossEntropy: "+tc.want, func() {
			VocabParallelCrossEntropy(Eval(context.Background()), parallel.Self(), logits, tensor.FromSlice(dev, tc.targets, 1, 2), tc.o)
		}, name)
	}
}

func TestVocabParallelCrossEntropyF32WideRows(t *testing.T) {
	// Float32 logits whose rows span several of the kernels' column blocks on each rank
	// (a ramp along the row gives the ranks different maxima), against the float64
	// reference. Tolerances: each e^(x−M) is computed in float32 from x−M rounded to
	// float32, |x−M| ≤ 14 here (relative error ≤ 8.5·2⁻²³); the loss sees a
	// softmax-weighted average of that, then its own float32 rounding.
	const b, tt, w, vocab = 2, 3, 8400, 8390
	const lossTol, gradTol = 1e-6, 1.5e-6
	logits, targets := ceProblem(b, tt, w, vocab, true)
	for i := range logits {
		logits[i] = float64(float32(logits[i] + 2*float64(i%w)/w))
	}
	g := seqValues(b*tt, 24)
	o := CrossEntropyOptions{Vocab: vocab, Ignore: true, IgnoreIndex: -100, LabelSmoothing: 0.1}
	wantLoss, wantGrad := ceReference(logits, targets, b, tt, w, vocab, g, o)
	for _, tp := range []int{1, 2} {
		t.Run(fmt.Sprintf("tp%d", tp), func(t *testing.T) {
			onRanks(t, tp, func(c parallel.Comm, dev *tensor.Device) (struct{}, error) {
				lo, width := c.Rank()*w/tp, w/tp
				x := tensor.FromSlice(dev, cols(logits, w, lo, width), b, tt, width).Cast(tensor.F32).SetRequiresGrad(true)
				loss := VocabParallelCrossEntropy(Eval(context.Background()), c, x, tensor.FromSlice(dev, targets, b, tt), o)
				for i, got := range tensor.ToSlice[float64](loss) {
					if d := got - wantLoss[i]; d > lossTol*(1+wantLoss[i]) || d < -lossTol*(1+wantLoss[i]) {
						t.Errorf("rank %d row %d: loss %.9g, want %.9g", c.Rank(), i, got, wantLoss[i])
					}
				}
				tensor.Sum(tensor.Mul(loss, tensor.FromSlice(dev, g, b, tt).Cast(tensor.F32))).Backward()
				want := cols(wantGrad, w, lo, width)
				for i, got := range tensor.ToSlice[float64](x.Grad()) {
					row := i / width
					tol := gradTol * (math.Abs(want[i]) + math.Abs(g[row])*o.LabelSmoothing/vocab)
					if int64(lo+i%width) == targets[row] {
						tol = gradTol * math.Abs(g[row]) // p − 1, formed in float64
					}
					if d := got - want[i]; d > tol || d < -tol {
						t.Errorf("rank %d row %d column %d: gradient %.9g, want %.9g", c.Rank(), row, lo+i%width, got, want[i])
						return struct{}{}, nil
					}
				}
				return struct{}{}, nil
			})
		})
	}
}
