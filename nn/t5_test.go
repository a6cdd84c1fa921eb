package nn

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"megago/parallel"
	"megago/tensor"
)

// t5Batch is 2 encoder sequences of 8 tokens (sequence 1 padded after 5) and 2 decoder
// sequences of 4.
var t5Batch = struct {
	ids, attend, labels []int64
}{
	ids:    []int64{3, 17, 2, 99, 42, 5, 7, 64, 9, 1, 8, 77, 31, 0, 0, 0},
	attend: []int64{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0},
	labels: []int64{11, 4, -100, 98, 55, 3, -100, -100},
}

// t5Step is a rankStep running T5 on t5Batch.
func t5Step(p *Pass, mm hfModel) (*tensor.Tensor, *tensor.Tensor, map[string]*tensor.Tensor) {
	m := mm.(*T5)
	dev := m.Word.Weight.Device()
	labels := tensor.FromSlice(dev, t5Batch.labels, 2, 4)
	logits := m.Forward(p, T5Input{IDs: tensor.FromSlice(dev, t5Batch.ids, 2, 8), Attend: tensor.FromSlice(dev, t5Batch.attend, 2, 8),
		DecoderIDs: T5ShiftRight(labels, 0, 0)})
	loss, _ := m.Loss(p, logits, labels)
	return logits, loss, nil
}

func TestT5TensorParallelEquivalence(t *testing.T) {
	base := NewT5Config(2, 16, 4, 4, 24, 100)
	base.DecoderLayers = 1
	base.VocabMultiple = 1
	noDrop := base
	noDrop.Dropout, noDrop.AttnDropout = 0, 0
	for _, tc := range []struct {
		name  string
		cfg   T5Config
		sp    bool
		train bool
	}{
		{"t5", noDrop, false, false},
		{"t5-dropout", base, false, true},
		{"t5-sp-dropout", base, true, true},
	} {
		build := func(b *Builder) (hfModel, error) { return NewT5(b, tc.cfg, Stage{}) }
		ref := runRanks(t, 1, false, trainPass(tc.train), tensor.F64, build, nil, t5Step)
		for _, tp := range []int{2, 4} {
			t.Run(fmt.Sprintf("%s/tp%d", tc.name, tp), func(t *testing.T) {
				requireTPEquivalent(t, ref, runRanks(t, tp, tc.sp, trainPass(tc.train), tensor.F64, build, nil, t5Step))
			})
		}
	}
}

// TestT5DropoutSites checks that training drops out (the loss changes) and that the
// dropout sites are independent of the layout (the TP test) and repeat for the same Pass.
func TestT5DropoutSites(t *testing.T) {
	cfg := NewT5Config(1, 16, 4, 4, 24, 100)
	build := func(b *Builder) (hfModel, error) { return NewT5(b, cfg, Stage{}) }
	eval := runRanks(t, 1, false, trainPass(false), tensor.F64, build, nil, t5Step)
	train := runRanks(t, 1, false, trainPass(true), tensor.F64, build, nil, t5Step)
	again := runRanks(t, 1, false, trainPass(true), tensor.F64, build, nil, t5Step)
	require.NotEqual(t, eval.loss, train.loss)
	require.Equal(t, train.loss, again.loss)
}

func TestT5RejectsPipelineStages(t *testing.T) {
	cfg := NewT5Config(2, 16, 4, 4, 24, 100)
	cfg.DecoderLayers = 3
	b := testBuilder(parallel.Self(), false)
	for _, stage := range []Stage{
		{PreProcess: true, NumLayers: 1},
		{PostProcess: true, FirstLayer: 1, NumLayers: 4},
		{PreProcess: true, PostProcess: true, NumLayers: 3},
	} {
		_, err := NewT5(b, cfg, stage)
		require.True(t, errors.Is(err, errT5Pipeline), "stage %+v: %v", stage, err)
		require.ErrorContains(t, err, "nn: T5 under pipeline parallelism is not supported; use TP and DP")
	}
	for _, stage := range []Stage{{}, WholeModel(2), WholeModel(5)} {
		_, err := NewT5(b, cfg, stage)
		require.NoError(t, err, "stage %+v", stage)
	}
}

func TestT5ConfigErrors(t *testing.T) {
	b := testBuilder(parallel.Self(), false)
	for _, tc := range []struct {
		name string
		edit func(*T5Config)
		want string
	}{
		{"layernorm", func(c *T5Config) { c.Norm = LayerNormKind }, "RMSNormKind"},
		{"bias", func(c *T5Config) { c.Bias = true }, "no biases"},
		{"scaled", func(c *T5Config) { c.NoAttentionScale = false }, "NoAttentionScale"},
		{"gqa", func(c *T5Config) { c.KVHeads = 2 }, "grouped-query"},
		{"heads-tp", func(c *T5Config) { c.Heads, c.HeadSize = 3, 4 }, "Heads = 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := NewT5Config(1, 12, 4, 3, 24, 100)
			tc.edit(&cfg)
			bb := *b
			if tc.name == "heads-tp" {
				require.NoError(t, parallel.RunLocal(2, func(c parallel.Comm) error {
					bb.TP = c
					_, err := NewT5(&bb, cfg, Stage{})
					if err == nil || !strings.Contains(err.Error(), tc.want) {
						return fmt.Errorf("got %v, want %q", err, tc.want)
					}
					return nil
				}))
				return
			}
			_, err := NewT5(&bb, cfg, Stage{})
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// TestT5HFRoundTrip converts random parameters to Hugging Face names and back, and checks
// the fused cross-attention k/v split.
func TestT5HFRoundTrip(t *testing.T) {
	b := testBuilder(parallel.Self(), false)
	cfg := NewT5Config(2, 8, 2, 3, 16, 10)
	m, err := NewT5(b, cfg, Stage{})
	require.NoError(t, err)
	global := map[string]*tensor.Tensor{}
	for _, p := range m.Params() {
		global[p.Name] = p.Tensor
	}
	global["embedding.word.weight"] = padRows(m.Word.Weight.Detach().Narrow(0, 0, 10), m.Vp)
	hf, err := m.ToHF(global)
	require.NoError(t, err)
	// Per stack: bias, final norm; per layer: norms, q/k/v/o, wi/wo; decoder: cross q/k/v/o.
	require.Len(t, hf, 1+2*(2+2*(2+4+2))+2*(1+4))
	require.Equal(t, tensor.Shape{32, 2}, hf["encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"].Shape())
	require.Equal(t, tensor.Shape{6, 8}, hf["decoder.block.1.layer.1.EncDecAttention.v.weight"].Shape())
	back, err := m.FromHF(hf)
	require.NoError(t, err)
	require.Len(t, back, len(global))
	for name, want := range global {
		require.Equal(t, tensor.ToSlice[float64](want), tensor.ToSlice[float64](back[name]), name)
	}
	// Head 1's value rows are rows [2·HS·1 + HS, 2·HS·2) of the fused k/v weight.
	hs, c := 3, 8
	kv := tensor.ToSlice[float64](global["decoder.layers.0.cross.kv.weight"])
	v := tensor.ToSlice[float64](hf["decoder.block.0.layer.1.EncDecAttention.v.weight"])
	require.Equal(t, kv[3*hs*c:4*hs*c], v[hs*c:2*hs*c])

	delete(hf, "decoder.block.1.layer.1.EncDecAttention.k.weight")
	_, err = m.FromHF(hf)
	require.ErrorContains(t, err, "decoder.block.1.layer.1.EncDecAttention.k.weight")
	require.Equal(t, 3, m.HFConfig()["d_kv"])
}

func TestT5ShiftRight(t *testing.T) {
	dev := tensor.NewCPU()
	got := T5ShiftRight(tensor.FromSlice(dev, []int64{5, -100, 7, 8, 9, 10}, 2, 3), 0, 1)
	require.Equal(t, []int64{0, 5, 1, 0, 8, 9}, tensor.ToSlice[int64](got))
}

func TestRelativePositionBucketSmall(t *testing.T) {
	// 32 buckets, max distance 128, as Hugging Face: bidirectional buckets 0-15 are keys at
	// or before the query, 16-31 after; exact up to distance 7, then logarithmic.
	for _, tc := range []struct {
		rel, bi, uni int
	}{{0, 0, 0}, {-1, 1, 1}, {1, 17, 0}, {-7, 7, 7}, {-8, 8, 8}, {-15, 9, 15}, {-16, 10, 16}, {-127, 15, 31}, {-500, 15, 31}, {500, 31, 0}} {
		require.Equal(t, tc.bi, RelativePositionBucket(tc.rel, true, 32, 128), "bidirectional %d", tc.rel)
		require.Equal(t, tc.uni, RelativePositionBucket(tc.rel, false, 32, 128), "unidirectional %d", tc.rel)
	}
}

// The shared embedding is drawn with EmbeddingInitStd (InitStd when 0), the same slice
// of the same draw at every TP size; other weights keep InitStd.
func TestT5EmbeddingInitStd(t *testing.T) {
	sampleStd := func(x []float64) float64 {
		s := 0.0
		for _, v := range x {
			s += v * v
		}
		return math.Sqrt(s / float64(len(x)))
	}
	for _, tc := range []struct{ emb, want float64 }{{0, 0.02}, {1, 1}} {
		cfg := NewT5Config(1, 16, 4, 4, 24, 100)
		cfg.EmbeddingInitStd = tc.emb
		m, err := NewT5(testBuilder(parallel.Self(), false), cfg, Stage{})
		require.NoError(t, err)
		// 128·16 = 2048 normal draws: the sample std is within 5% with overwhelming odds.
		require.InEpsilon(t, tc.want, sampleStd(tensor.ToSlice[float64](m.Word.Weight.Tensor)), 0.05, "embedding")
		require.InEpsilon(t, 0.02, sampleStd(tensor.ToSlice[float64](m.Decoder.Layers[0].Cross.Q.Weight.Tensor)), 0.1, "cross q")
	}
	cfg := NewT5Config(1, 16, 4, 4, 24, 100)
	cfg.EmbeddingInitStd = -1
	_, err := NewT5(testBuilder(parallel.Self(), false), cfg, Stage{})
	require.ErrorContains(t, err, "EmbeddingInitStd = -1")
}
