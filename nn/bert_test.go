package nn

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"megago/parallel"
	"megago/tensor"
)

// bertBatch is a batch of 2 sequences of 8 tokens; sequence 1 is padded after 6.
var bertBatch = struct {
	ids, types, attend, lmLabels, binary []int64
}{
	ids:      []int64{2, 17, 5, 99, 42, 5, 7, 64, 2, 1, 8, 77, 31, 30, 0, 0},
	types:    []int64{0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 1, 1, 1, 0, 0},
	attend:   []int64{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0},
	lmLabels: []int64{-100, 11, -100, -100, 3, -100, 98, -100, -100, -100, 55, -100, 4, -100, -100, -100},
	binary:   []int64{0, 1},
}

// bertStep is a rankStep running BERT on bertBatch.
func bertStep(p *Pass, mm hfModel) (*tensor.Tensor, *tensor.Tensor, map[string]*tensor.Tensor) {
	m := mm.(*BERT)
	dev := m.LMOutput.Weight.Device()
	in := BERTInput{IDs: tensor.FromSlice(dev, bertBatch.ids, 2, 8), TokenTypes: tensor.FromSlice(dev, bertBatch.types, 2, 8),
		Attend: tensor.FromSlice(dev, bertBatch.attend, 2, 8)}
	out := m.Forward(p, in)
	var binary *tensor.Tensor
	if out.BinaryLogits != nil {
		binary = tensor.FromSlice(dev, bertBatch.binary, 2)
	}
	total, _, _ := m.Loss(p, out, tensor.FromSlice(dev, bertBatch.lmLabels, 2, 8), binary)
	extra := map[string]*tensor.Tensor{}
	if out.BinaryLogits != nil {
		extra["binary"] = out.BinaryLogits
	}
	return out.LMLogits, total, extra
}

// trainPass returns a Pass with dropout on when train is set.
func trainPass(train bool) func() *Pass {
	return func() *Pass { return &Pass{Ctx: context.Background(), Train: train, RNG: tensor.NewRNG(99)} }
}

// requireTPEquivalent checks a TP=N run against the TP=1 run ref: the same loss, full
// logits and extra outputs, and each rank's gradient equal to its slice of ref's.
func requireTPEquivalent(t *testing.T, ref, got rankRun) {
	t.Helper()
	// All-reduces and split matmuls reorder float64 sums.
	const tol = 1e-12
	require.InDelta(t, ref.loss, got.loss, tol, "loss")
	require.InDeltaSlice(t, tensor.ToSlice[float64](ref.logits), tensor.ToSlice[float64](got.logits), tol, "logits")
	for name, x := range ref.extra {
		require.InDeltaSlice(t, tensor.ToSlice[float64](x.Detach()), tensor.ToSlice[float64](got.extra[name].Detach()), tol, name)
	}
	want := map[string]*Param{}
	for _, p := range ref.params[0] {
		want[p.Name] = p
	}
	for r, ps := range got.params {
		require.Len(t, ps, len(ref.params[0]), "rank %d parameters", r)
		for _, p := range ps {
			w := want[p.Name]
			require.NotNil(t, w, "rank %d: unexpected parameter %s", r, p.Name)
			require.NotNil(t, p.Grad(), "rank %d: no gradient for %s", r, p.Name)
			d := max(p.PartitionDim, 0)
			slice := w.Grad().Narrow(d, p.Start()[d], p.Shape()[d])
			require.InDeltaSlice(t, tensor.ToSlice[float64](slice), tensor.ToSlice[float64](p.Grad()), tol, "rank %d grad %s", r, p.Name)
		}
	}
}

func TestBERTTensorParallelEquivalence(t *testing.T) {
	base := NewBERTConfig(2, 16, 4, 100, 8)
	base.VocabMultiple = 1
	noDrop := base
	noDrop.Dropout, noDrop.AttnDropout = 0, 0
	preLN := base
	preLN.PostLN = false
	mlmOnly := base
	mlmOnly.NoBinaryHead = true
	for _, tc := range []struct {
		name  string
		cfg   BERTConfig
		sp    bool
		train bool
	}{
		{"post-ln", noDrop, false, false},
		{"post-ln-dropout", base, false, true},
		{"post-ln-sp-dropout", base, true, true},
		{"pre-ln-sp-dropout", preLN, true, true},
		{"mlm-only-sp", mlmOnly, true, true},
	} {
		build := func(b *Builder) (hfModel, error) { return NewBERT(b, tc.cfg, Stage{}) }
		ref := runRanks(t, 1, false, trainPass(tc.train), tensor.F64, build, nil, bertStep)
		for _, tp := range []int{2, 4} {
			t.Run(fmt.Sprintf("%s/tp%d", tc.name, tp), func(t *testing.T) {
				requireTPEquivalent(t, ref, runRanks(t, tp, tc.sp, trainPass(tc.train), tensor.F64, build, nil, bertStep))
			})
		}
	}
}

// TestBERTPipelineStages splits a BERT into two pipeline stages by hand: their outputs,
// loss and gradients (the tied output's Shared copy included) equal the whole model's.
func TestBERTPipelineStages(t *testing.T) {
	cfg := NewBERTConfig(4, 16, 4, 100, 8)
	cfg.Dropout, cfg.AttnDropout = 0, 0
	whole := runRanks(t, 1, false, trainPass(false), tensor.F64,
		func(b *Builder) (hfModel, error) { return NewBERT(b, cfg, Stage{}) }, nil, bertStep)

	b := testBuilder(parallel.Self(), false)
	first, err := NewBERT(b, cfg, Stage{PreProcess: true, NumLayers: 2})
	require.NoError(t, err)
	last, err := NewBERT(b, cfg, Stage{PostProcess: true, FirstLayer: 2, NumLayers: 2})
	require.NoError(t, err)
	require.True(t, last.LMOutput.Weight.Shared)
	require.Equal(t, tensor.ToSlice[float64](first.Word.Weight.Tensor), tensor.ToSlice[float64](last.LMOutput.Weight.Tensor))

	p := Eval(context.Background())
	dev := b.Dev
	h := first.Forward(p, BERTInput{IDs: tensor.FromSlice(dev, bertBatch.ids, 2, 8),
		TokenTypes: tensor.FromSlice(dev, bertBatch.types, 2, 8), Attend: tensor.FromSlice(dev, bertBatch.attend, 2, 8)}).Hidden
	recv := h.Detach().SetRequiresGrad(true) // what the next stage receives
	out := last.Forward(p, BERTInput{Hidden: recv, Attend: tensor.FromSlice(dev, bertBatch.attend, 2, 8)})
	loss, _, _ := last.Loss(p, out, tensor.FromSlice(dev, bertBatch.lmLabels, 2, 8), tensor.FromSlice(dev, bertBatch.binary, 2))
	loss.Backward()
	h.BackwardWithGrad(recv.Grad())

	// Stage splits change nothing in the arithmetic, but the tied gradient is a sum of two.
	const tol = 1e-12
	require.InDelta(t, whole.loss, loss.Item(), tol)
	require.InDeltaSlice(t, tensor.ToSlice[float64](whole.logits), tensor.ToSlice[float64](out.LMLogits), tol)
	grads := map[string]*tensor.Tensor{}
	for _, q := range append(first.Params(), last.Params()...) {
		if g, ok := grads[q.Name]; ok { // the tied word embedding: sum the two copies' gradients
			grads[q.Name] = tensor.Add(g, q.Grad())
			continue
		}
		grads[q.Name] = q.Grad()
	}
	require.Len(t, grads, len(whole.params[0]))
	for _, q := range whole.params[0] {
		require.InDeltaSlice(t, tensor.ToSlice[float64](q.Grad()), tensor.ToSlice[float64](grads[q.Name]), tol, q.Name)
	}
}

func TestBERTParamNames(t *testing.T) {
	m, err := NewBERT(testBuilder(parallel.Self(), false), NewBERTConfig(1, 8, 2, 10, 4), Stage{})
	require.NoError(t, err)
	var names []string
	for _, p := range m.Params() {
		names = append(names, p.Name)
	}
	for _, want := range []string{"embedding.word.weight", "embedding.position.weight", "embedding.token_type.weight",
		"embedding.norm.weight", "embedding.norm.bias", "layers.0.attn.qkv.weight", "layers.0.norm2.bias",
		"pooler.weight", "pooler.bias", "lm_head.dense.weight", "lm_head.dense.bias", "lm_head.norm.weight",
		"lm_head.norm.bias", "lm_head.bias", "binary_head.weight", "binary_head.bias"} {
		require.Contains(t, names, want)
	}
	require.Len(t, names, 14+12) // 12 per layer
	bias := m.LMOutput.Bias
	require.Equal(t, 0, bias.PartitionDim, "lm_head.bias is split over TP like the vocabulary")
	require.Equal(t, tensor.Shape{PaddedVocab(10, 0, 1)}, bias.GlobalShape)
}

// TestBERTHFRoundTrip converts random parameters to Hugging Face names and back.
func TestBERTHFRoundTrip(t *testing.T) {
	b := testBuilder(parallel.Self(), false)
	m, err := NewBERT(b, NewBERTConfig(2, 8, 2, 10, 4), Stage{})
	require.NoError(t, err)
	global := map[string]*tensor.Tensor{}
	for _, p := range m.Params() {
		global[p.Name] = p.Tensor
	}
	// Vocabulary padding must be zero to survive the trip.
	global["embedding.word.weight"] = padRows(m.Word.Weight.Detach().Narrow(0, 0, 10), m.Vp)
	global["lm_head.bias"] = padRows(tensor.Arange(b.Dev, tensor.F64, 1, 1, 10), m.Vp)
	hf, err := m.ToHF(global)
	require.NoError(t, err)
	require.Equal(t, tensor.Shape{10, 8}, hf["bert.embeddings.word_embeddings.weight"].Shape())
	require.Equal(t, tensor.Shape{10}, hf["cls.predictions.bias"].Shape())
	require.Len(t, hf, len(global)+2*4) // the fused qkv weight and bias are 3 tensors each
	back, err := m.FromHF(hf)
	require.NoError(t, err)
	require.Len(t, back, len(global))
	for name, want := range global {
		require.Equal(t, tensor.ToSlice[float64](want), tensor.ToSlice[float64](back[name]), name)
	}

	// q, k and v are the per-head rows of the fused projection: head h of q is rows
	// [3·HS·h, 3·HS·h + HS) of the fused weight.
	q := tensor.ToSlice[float64](hf["bert.encoder.layer.0.attention.self.query.weight"])
	fused := tensor.ToSlice[float64](global["layers.0.attn.qkv.weight"])
	hs, c := 4, 8
	require.Equal(t, fused[3*hs*c:3*hs*c+hs*c], q[hs*c:2*hs*c], "head 1 of q")

	delete(hf, "bert.encoder.layer.1.output.dense.bias")
	_, err = m.FromHF(hf)
	require.ErrorContains(t, err, "bert.encoder.layer.1.output.dense.bias")
	hf["bert.encoder.layer.1.output.dense.bias"] = tensor.Zeros(b.Dev, tensor.F64, 7)
	_, err = m.FromHF(hf)
	require.ErrorContains(t, err, "bert.encoder.layer.1.output.dense.bias has shape [7]")

	pre := NewBERTConfig(1, 8, 2, 10, 4)
	pre.PostLN = false
	pm, err := NewBERT(b, pre, Stage{})
	require.NoError(t, err)
	_, err = pm.ToHF(global)
	require.ErrorContains(t, err, "pre-LN")
	require.Equal(t, []string{"BertForPreTraining"}, m.HFConfig()["architectures"])
	require.Equal(t, "gelu", m.HFConfig()["hidden_act"], "erf GeLU")
}

func TestBERTConfigErrors(t *testing.T) {
	b := testBuilder(parallel.Self(), false)
	for _, tc := range []struct {
		name string
		edit func(*BERTConfig)
		want string
	}{
		{"rope", func(c *BERTConfig) { c.Position = RoPE }, "learned positions"},
		{"swiglu", func(c *BERTConfig) { c.Activation = SwiGLU }, "SwiGLU"},
		{"no-positions", func(c *BERTConfig) { c.MaxPosition = 0 }, "MaxPosition"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := NewBERTConfig(1, 8, 2, 10, 4)
			tc.edit(&cfg)
			_, err := NewBERT(b, cfg, Stage{})
			require.ErrorContains(t, err, tc.want)
		})
	}
	_, err := NewBERT(b, NewBERTConfig(2, 8, 2, 10, 4), Stage{PreProcess: true, FirstLayer: 1, NumLayers: 2})
	require.ErrorContains(t, err, "outside [0, 2)")
}
