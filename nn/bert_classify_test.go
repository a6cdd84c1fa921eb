package nn

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"megago/parallel"
	"megago/tensor"
)

// classifyLabels are the class labels of bertBatch's two sequences.
var classifyLabels = []int64{2, 0}

// classifyInput is bertBatch as a BERTInput on dev.
func classifyInput(dev *tensor.Device) BERTInput {
	return BERTInput{IDs: tensor.FromSlice(dev, bertBatch.ids, 2, 8), TokenTypes: tensor.FromSlice(dev, bertBatch.types, 2, 8),
		Attend: tensor.FromSlice(dev, bertBatch.attend, 2, 8)}
}

// classifyLoss runs m on bertBatch and returns the logits and the loss.
func classifyLoss(p *Pass, m *BERTClassifier) (logits, loss *tensor.Tensor) {
	dev := m.Encoder.Block.Params()[0].Device()
	_, logits = m.Forward(p, classifyInput(dev))
	return logits, m.Loss(logits, tensor.FromSlice(dev, classifyLabels, 2))
}

// TestBERTClassifierHead: the classifier's encoder and pooler are BERT's (same names, so
// the same initialization), and its scores are its classifier applied to BERT's pooled
// output, which TestBERTGolden checks against PyTorch.
func TestBERTClassifierHead(t *testing.T) {
	for _, postLN := range []bool{true, false} {
		cfg := NewBERTConfig(2, 16, 4, 100, 8)
		cfg.Dropout, cfg.AttnDropout, cfg.PostLN = 0, 0, postLN
		b := testBuilder(parallel.Self(), false)
		bert, err := NewBERT(b, cfg, Stage{})
		require.NoError(t, err)
		m, err := NewBERTClassifier(b, cfg, 3, Stage{})
		require.NoError(t, err)
		p := Eval(context.Background())
		pooled := bert.Forward(p, classifyInput(b.Dev)).Pooled // [B, C]
		want := tensor.Add(tensor.MatMulT(pooled, m.Classifier.Weight.Tensor, false, true), m.Classifier.Bias.Tensor)
		got, _ := classifyLoss(p, m)
		require.Equal(t, tensor.Shape{2, 3}, got.Shape())
		require.InDeltaSlice(t, tensor.ToSlice[float64](want), tensor.ToSlice[float64](got), 1e-12, "post-LN %v", postLN)
	}
	_, err := NewBERTClassifier(testBuilder(parallel.Self(), false), NewBERTConfig(1, 8, 2, 10, 4), 1, Stage{})
	require.ErrorContains(t, err, "1 classes")
}

// TestBERTClassifierFiniteDifferences checks autograd's gradients of the loss against
// central differences at a few entries of each kind of parameter (float64, no dropout).
func TestBERTClassifierFiniteDifferences(t *testing.T) {
	cfg := NewBERTConfig(2, 16, 4, 100, 8)
	cfg.Dropout, cfg.AttnDropout = 0, 0
	m, err := NewBERTClassifier(testBuilder(parallel.Self(), false), cfg, 3, Stage{})
	require.NoError(t, err)
	p := Eval(context.Background())
	_, loss := classifyLoss(p, m)
	loss.Backward()
	params := map[string]*Param{}
	for _, q := range m.Params() {
		params[q.Name] = q
	}
	const h = 1e-5
	for _, name := range []string{"classifier.weight", "classifier.bias", "pooler.weight", "layers.1.mlp.fc1.weight",
		"layers.0.attn.qkv.weight", "embedding.word.weight", "embedding.norm.bias"} {
		q := params[name]
		require.NotNil(t, q, name)
		w := tensor.ToSlice[float64](q.Tensor)
		g := tensor.ToSlice[float64](q.Grad())
		for _, i := range []int{0, len(w) / 3, len(w) - 1} {
			if name == "embedding.word.weight" {
				i = int(bertBatch.ids[1])*16 + i%16 // a row the batch uses
			}
			at := func(v float64) float64 {
				w[i] = v
				q.Tensor.CopyFrom(tensor.FromSlice(q.Tensor.Device(), w, q.Shape()...))
				var l float64
				q.Tensor.Device().NoGrad(func() { _, out := classifyLoss(p, m); l = out.Item() })
				return l
			}
			x := w[i]
			fd := (at(x+h) - at(x-h)) / (2 * h)
			at(x)
			// Central differences are exact to O(h²) ≈ 1e-10 in float64.
			require.InDelta(t, fd, g[i], 1e-7*math.Max(1, math.Abs(fd)), "%s[%d]", name, i)
		}
	}
}

// classifyRun is one rank's result: the loss, the logits and the parameters.
type classifyRun struct {
	loss   float64
	logits []float64
	params []*Param
}

// runClassifier builds the classifier on tp goroutine ranks and runs forward and
// backward on bertBatch; it returns each rank's run.
func runClassifier(t *testing.T, cfg BERTConfig, tp int, sp, train bool) []classifyRun {
	t.Helper()
	out := make([]classifyRun, tp)
	var mu sync.Mutex
	err := parallel.RunLocal(tp, func(c parallel.Comm) error {
		m, err := NewBERTClassifier(testBuilder(c, sp), cfg, 3, Stage{})
		if err != nil {
			return err
		}
		p := trainPass(train)()
		logits, loss := classifyLoss(p, m)
		loss.Backward()
		if err := ReduceSequenceParallelGrads(p.Ctx, c, m.Params()); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		out[c.Rank()] = classifyRun{loss.Item(), tensor.ToSlice[float64](logits), m.Params()}
		return nil
	})
	require.NoError(t, err)
	return out
}

// TestBERTClassifierTensorParallel: at TP = 2 (with sequence parallelism and dropout)
// every rank has the TP=1 loss and scores, and its slice of each gradient.
func TestBERTClassifierTensorParallel(t *testing.T) {
	cfg := NewBERTConfig(2, 16, 4, 100, 8)
	cfg.VocabMultiple = 1 // the same padding at every TP
	for _, tc := range []struct {
		name      string
		sp, train bool
	}{{"plain", false, false}, {"sp-dropout", true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			ref := runClassifier(t, cfg, 1, false, tc.train)[0]
			want := map[string]*Param{}
			for _, q := range ref.params {
				want[q.Name] = q
			}
			// All-reduces and split matmuls reorder float64 sums.
			const tol = 1e-12
			for r, got := range runClassifier(t, cfg, 2, tc.sp, tc.train) {
				require.InDelta(t, ref.loss, got.loss, tol, "rank %d loss", r)
				require.InDeltaSlice(t, ref.logits, got.logits, tol, "rank %d scores", r)
				require.Len(t, got.params, len(ref.params))
				for _, q := range got.params {
					w := want[q.Name]
					d := max(q.PartitionDim, 0)
					slice := w.Grad().Narrow(d, q.Start()[d], q.Shape()[d])
					require.InDeltaSlice(t, tensor.ToSlice[float64](slice), tensor.ToSlice[float64](q.Grad()), tol,
						fmt.Sprintf("rank %d grad %s", r, q.Name))
				}
			}
		})
	}
}

// TestBERTClassifierStages: two pipeline stages built by hand give the whole model's
// scores and gradients.
func TestBERTClassifierStages(t *testing.T) {
	cfg := NewBERTConfig(4, 16, 4, 100, 8)
	cfg.Dropout, cfg.AttnDropout = 0, 0
	whole := runClassifier(t, cfg, 1, false, false)[0]
	b := testBuilder(parallel.Self(), false)
	first, err := NewBERTClassifier(b, cfg, 3, Stage{PreProcess: true, NumLayers: 2})
	require.NoError(t, err)
	last, err := NewBERTClassifier(b, cfg, 3, Stage{PostProcess: true, FirstLayer: 2, NumLayers: 2})
	require.NoError(t, err)
	require.Nil(t, first.Classifier)
	p := Eval(context.Background())
	in := classifyInput(b.Dev)
	h, none := first.Forward(p, in)
	require.Nil(t, none)
	recv := h.Detach().SetRequiresGrad(true)
	_, logits := last.Forward(p, BERTInput{Hidden: recv, Attend: in.Attend})
	loss := last.Loss(logits, tensor.FromSlice(b.Dev, classifyLabels, 2))
	loss.Backward()
	h.BackwardWithGrad(recv.Grad())
	const tol = 1e-12 // the same arithmetic, placed differently
	require.InDelta(t, whole.loss, loss.Item(), tol)
	require.InDeltaSlice(t, whole.logits, tensor.ToSlice[float64](logits), tol)
	got := map[string]*Param{}
	for _, q := range append(first.Params(), last.Params()...) {
		got[q.Name] = q
	}
	require.Len(t, got, len(whole.params))
	for _, q := range whole.params {
		require.InDeltaSlice(t, tensor.ToSlice[float64](q.Grad()), tensor.ToSlice[float64](got[q.Name].Grad()), tol, q.Name)
	}
}
