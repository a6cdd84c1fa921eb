package nn

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"megago/internal/golden"
	"megago/parallel"
	"megago/tensor"
)

func goldenT5Config(t *testing.T, f *golden.File) T5Config {
	t.Helper()
	require.Equal(t, "relu", f.ConfigString("feed_forward_proj"))
	require.Equal(t, "none", f.ConfigString("attn_scale"))
	require.True(t, f.ConfigBool("tie_word_embeddings"))
	cfg := NewT5Config(f.ConfigInt("num_layers"), f.ConfigInt("d_model"), f.ConfigInt("num_heads"), f.ConfigInt("d_kv"),
		f.ConfigInt("d_ff"), f.ConfigInt("vocab_size"))
	cfg.DecoderLayers = f.ConfigInt("num_decoder_layers")
	cfg.RelativeBuckets = f.ConfigInt("relative_attention_num_buckets")
	cfg.RelativeMaxDistance = f.ConfigInt("relative_attention_max_distance")
	cfg.NormEps = f.ConfigFloat("layer_norm_epsilon")
	cfg.Dropout, cfg.AttnDropout = f.ConfigFloat("dropout_rate"), f.ConfigFloat("dropout_rate")
	return cfg
}

// TestT5Golden loads the T5ForConditionalGeneration (v1.0) of testdata/golden/t5.json
// (PyTorch, by gen.py) through FromHF, at TP=1 and TP=2, and matches PyTorch's logits,
// loss, encoder output, decoder output and every parameter gradient.
func TestT5Golden(t *testing.T) {
	f, err := golden.Load("testdata/golden/t5.json")
	require.NoError(t, err)
	cfg := goldenT5Config(t, f)
	for _, tc := range testGrid(opsVariants, []int{1, 2}) {
		t.Run(fmt.Sprintf("%s/tp%d", tc.ops.name, tc.tp), func(t *testing.T) {
			run := runRanks(t, tc.tp, false, func() *Pass { return Eval(context.Background()) }, tensor.F32,
				func(b *Builder) (hfModel, error) { b.Unfused = tc.ops.unfused; return NewT5(b, cfg, Stage{}) },
				func(m hfModel) (map[string]*tensor.Tensor, error) {
					return m.FromHF(goldenParams(m.Params()[0].Device(), f))
				},
				func(p *Pass, mm hfModel) (*tensor.Tensor, *tensor.Tensor, map[string]*tensor.Tensor) {
					m := mm.(*T5)
					dev := m.Word.Weight.Device()
					attend := goldenInts(dev, f.Input("attention_mask"))
					enc := m.Encode(p, goldenInts(dev, f.Input("input_ids")), attend)
					logits := m.Decode(p, goldenInts(dev, f.Input("decoder_input_ids")), nil, enc, attend)
					loss, _ := m.Loss(p, logits, goldenInts(dev, f.Input("labels")))
					return logits, loss, map[string]*tensor.Tensor{"encoder_last_hidden_state": enc}
				})
			checkGolden(t, f, run, cfg.Vocab)
			requireFusedRan(t, run, tc.ops.unfused, tensor.FusedAttention, tensor.FusedAddNorm, tensor.FusedBiasDropoutAdd)
		})
	}
}

// TestT5RelativePositionBucketGolden checks the buckets of relative positions −200..200,
// both ways, and of the golden inputs' query/key pairs against Hugging Face's formula as
// PyTorch evaluated it (float32 log, truncation).
func TestT5RelativePositionBucketGolden(t *testing.T) {
	f, err := golden.Load("testdata/golden/t5.json")
	require.NoError(t, err)
	nb, md := f.ConfigInt("relative_attention_num_buckets"), f.ConfigInt("relative_attention_max_distance")
	rel := f.Table("relative_positions")
	for _, tc := range []struct {
		table         string
		bidirectional bool
	}{{"relative_position_bucket_bidirectional", true}, {"relative_position_bucket_unidirectional", false}} {
		want := f.Table(tc.table)
		for i, r := range rel.Data {
			require.Equal(t, int(want.Data[i]), RelativePositionBucket(int(r), tc.bidirectional, nb, md), "%s: relative position %d", tc.table, r)
		}
	}
	for _, tc := range []struct {
		table         string
		bidirectional bool
	}{{"encoder_position_bucket", true}, {"decoder_position_bucket", false}} {
		want := f.Table(tc.table) // [Tq, Tk]
		tk := want.Shape[1]
		for i, w := range want.Data {
			q, k := i/tk, i%tk
			require.Equal(t, int(w), RelativePositionBucket(k-q, tc.bidirectional, nb, md), "%s[%d, %d]", tc.table, q, k)
		}
	}
}

// TestT5PositionBiasGolden checks RelativePositionBias.Forward against the encoder's and
// decoder's position bias [NH, T, T] that PyTorch computed from the golden tables.
func TestT5PositionBiasGolden(t *testing.T) {
	f, err := golden.Load("testdata/golden/t5.json")
	require.NoError(t, err)
	b := testBuilder(parallel.Self(), false)
	b.DType = tensor.F32
	for _, tc := range []struct {
		stack         string
		input         string
		bidirectional bool
	}{{"encoder", "input_ids", true}, {"decoder", "decoder_input_ids", false}} {
		w := f.Param(tc.stack + ".block.0.layer.0.SelfAttention.relative_attention_bias.weight")
		r := NewRelativePositionBias(b, tc.stack+".relative_bias", w.Shape[0], f.ConfigInt("relative_attention_max_distance"),
			w.Shape[1], tc.bidirectional, Normal(1))
		r.Weight.Tensor.CopyFrom(tensor.FromSlice(b.Dev, w.Data, w.Shape...))
		n := f.Input(tc.input).Shape[1]
		got := r.Forward(n, n, 0) // [1, NH, T, T]
		requireClose(t, tc.stack+" position bias", tensor.ToSlice[float64](got.Detach()), f.Output(tc.stack+"_position_bias").Data)
	}
}
