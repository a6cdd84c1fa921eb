package nn

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// validGPT2 is a small GPT-2-style configuration that Validate accepts.
func validGPT2() TransformerConfig {
	return TransformerConfig{NumLayers: 2, Hidden: 16, Heads: 4, Vocab: 100, MaxPosition: 8}
}

func TestValidateRejects(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(c *TransformerConfig)
		want []string // each must appear in the error
	}{
		{"heads not divisible by TP", func(c *TransformerConfig) { c.Heads, c.Hidden, c.TP = 6, 24, 4 },
			[]string{"Heads = 6 not divisible by TP = 4"}},
		{"hidden not divisible by heads", func(c *TransformerConfig) { c.Hidden = 18 },
			[]string{"Hidden = 18 not divisible by Heads = 4"}},
		{"query groups not dividing heads", func(c *TransformerConfig) { c.Heads, c.KVHeads, c.Hidden = 8, 3, 16 },
			[]string{"KVHeads = 3 must divide Heads = 8"}},
		{"query groups not divisible by TP", func(c *TransformerConfig) { c.KVHeads, c.TP = 2, 4 },
			[]string{"KVHeads = 2 not divisible by TP = 4"}},
		{"FFN not divisible by TP", func(c *TransformerConfig) { c.FFNHidden, c.TP = 30, 4 },
			[]string{"FFNHidden = 30 not divisible by TP = 4"}},
		{"negative CP", func(c *TransformerConfig) { c.CP = -2 }, []string{"CP = -2 must be ≥ 1"}},
		{"unknown CP comm type", func(c *TransformerConfig) { c.CP, c.CPCommType = 2, "ring" },
			[]string{`CPCommType "ring" is not one of p2p, all_gather`}},
		{"CP comm types not one per layer", func(c *TransformerConfig) { c.CP, c.CPCommType = 2, "p2p,a2a,p2p" },
			[]string{"has 3 values for 2 layers"}},
		{"CP hierarchy not multiplying to CP", func(c *TransformerConfig) { c.CP, c.CPHierarchy = 4, "2,3" },
			[]string{`CPHierarchy "2,3" multiplies to 6, not CP = 4`}},
		{"CP hierarchy syntax", func(c *TransformerConfig) { c.CP, c.CPHierarchy = 4, "2;2" },
			[]string{`CPHierarchy "2;2": want comma-separated sizes`}},
		{"dropout ≥ 1", func(c *TransformerConfig) { c.Dropout = 1 }, []string{"Dropout = 1"}},
		{"negative attention dropout", func(c *TransformerConfig) { c.AttnDropout = -0.1 }, []string{"AttnDropout = -0.1"}},
		{"RoPE with odd head size", func(c *TransformerConfig) { c.Position, c.Hidden = RoPE, 20 },
			[]string{"HeadSize = 5 must be even with RoPE"}},
		{"rotary percent above 1", func(c *TransformerConfig) { c.Position, c.RotaryPercent = RoPE, 1.5 },
			[]string{"RotaryPercent = 1.5 must be in (0, 1]"}},
		{"rotary percent rotating an odd count", func(c *TransformerConfig) { c.Position, c.RotaryPercent = RoPE, 0.75 },
			[]string{"rotates 3 of HeadSize = 4 channels"}},
		{"negative rope scaling", func(c *TransformerConfig) { c.RoPEScaling = -1 }, []string{"RoPEScaling = -1"}},
		{"unknown position kind", func(c *TransformerConfig) { c.Position = NoPositions + 1 }, []string{"Position = 4"}},
		{"learned positions without a table", func(c *TransformerConfig) { c.MaxPosition = 0 },
			[]string{"MaxPosition = 0"}},
		{"missing sizes", func(c *TransformerConfig) { c.NumLayers, c.Vocab = 0, -1 },
			[]string{"NumLayers = 0 must be ≥ 1", "Vocab = -1 must be ≥ 1"}},
		{"several at once", func(c *TransformerConfig) {
			c.Hidden, c.Heads, c.KVHeads, c.TP, c.CP, c.Dropout = 30, 4, 3, 8, -2, 2
		}, []string{"Hidden = 30 not divisible by Heads = 4", "KVHeads = 3 must divide Heads = 4",
			"Heads = 4 not divisible by TP = 8", "KVHeads = 3 not divisible by TP = 8", "CP = -2", "Dropout = 2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := validGPT2()
			tc.edit(&c)
			err := c.Validate()
			require.Error(t, err)
			require.True(t, strings.HasPrefix(err.Error(), "nn: invalid TransformerConfig: "), err.Error())
			for _, w := range tc.want {
				require.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestValidateAccepts(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  TransformerConfig
	}{
		{"gpt2", validGPT2()},
		{"gpt2 tp4", func() TransformerConfig { c := validGPT2(); c.TP = 4; return c }()},
		{"llama gqa tp2", LlamaConfig(2, 16, 4, 2, 24, 100).TransformerConfig},
		{"explicit head size", TransformerConfig{NumLayers: 1, Hidden: 18, Heads: 4, HeadSize: 8, Vocab: 10, MaxPosition: 4}},
		{"t5 relative positions", TransformerConfig{NumLayers: 1, Hidden: 16, Heads: 2, Vocab: 10,
			Position: RelativePositions, Norm: RMSNormKind, Activation: ReLU, NoAttentionScale: true}},
		{"dropout just below 1", func() TransformerConfig { c := validGPT2(); c.Dropout = 0.999; return c }()},
		{"cp4 per-layer comm types", func() TransformerConfig {
			c := validGPT2()
			c.CP, c.CPCommType, c.CPHierarchy = 4, "allgather, a2a+p2p", "2,2"
			return c
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) { require.NoError(t, tc.cfg.Validate()) })
	}
}

func TestDefaults(t *testing.T) {
	c := validGPT2()
	d := c.Defaults()
	require.Equal(t, TransformerConfig{NumLayers: 2, Hidden: 16, Heads: 4, KVHeads: 4, HeadSize: 4, FFNHidden: 64,
		Vocab: 100, MaxPosition: 8, NormEps: 1e-5, RoPETheta: 10000, InitStd: 0.02, RelativeBuckets: 32,
		RelativeMaxDistance: 128, TP: 1, CP: 1}, d)
	require.Equal(t, d, d.Defaults(), "Defaults is idempotent")
	// Megatron's later variants are left out of a default configuration's JSON, so
	// checkpoints record GPT-2 and Llama as they did before the variants existed.
	js, err := json.Marshal(LlamaConfig(2, 16, 4, 2, 24, 100).Defaults())
	require.NoError(t, err)
	for _, k := range []string{"RotaryPercent", "RoPEScaling", "QKVBias", "QKNorm"} {
		require.NotContains(t, string(js), k)
	}

	set := TransformerConfig{NumLayers: 3, Hidden: 16, Heads: 4, KVHeads: 2, HeadSize: 8, FFNHidden: 40, NormEps: 1e-6,
		RoPETheta: 5e5, InitStd: 0.01, RelativeBuckets: 8, RelativeMaxDistance: 16, TP: 2}
	require.Equal(t, set.KVHeads, set.Defaults().KVHeads)
	require.Equal(t, set.HeadSize, set.Defaults().HeadSize)
	require.Equal(t, set.FFNHidden, set.Defaults().FFNHidden)
	require.Equal(t, set.NormEps, set.Defaults().NormEps)
	require.Equal(t, set.RoPETheta, set.Defaults().RoPETheta)
	require.Equal(t, set.InitStd, set.Defaults().InitStd)
	require.Equal(t, set.RelativeBuckets, set.Defaults().RelativeBuckets)
	require.Equal(t, set.TP, set.Defaults().TP)

	// MEGATRON-FACTS: output projections use 0.02/√(2L).
	for _, l := range []int{1, 2, 12, 24} {
		c := TransformerConfig{NumLayers: l}
		require.InDelta(t, 0.02/math.Sqrt(2*float64(l)), c.OutputInitStd(), 1e-18, "L = %d", l)
	}
	require.InDelta(t, 0.01/math.Sqrt(6), set.OutputInitStd(), 1e-18)
}

func TestPaddedVocab(t *testing.T) {
	for _, tc := range []struct {
		vocab, multiple, tp, want int
	}{
		{50257, 0, 1, 50304}, // GPT-2: 393·128
		{50257, 128, 1, 50304},
		{50257, 0, 2, 50432}, // 197·256
		{50257, 0, 4, 50688}, // 99·512
		{50257, 0, 8, 51200}, // 50·1024
		{50257, 1, 1, 50257}, // multiple 1 pads only for TP
		{50257, 1, 2, 50258},
		{32000, 0, 1, 32000}, // Llama: already a multiple
		{32000, 0, 8, 32768}, // 32·1024
		{100, 64, 1, 128},
		{128, 0, 1, 128},
	} {
		require.Equal(t, tc.want, PaddedVocab(tc.vocab, tc.multiple, tc.tp), "PaddedVocab(%d, %d, %d)", tc.vocab, tc.multiple, tc.tp)
	}
}

// TestCPPositions: Megatron's load-balanced chunks (rank r holds chunks r and 2·cp−1−r
// of 2·cp), written out by hand for a sequence of 8 at cp 2, and cp 1 holding all.
func TestCPPositions(t *testing.T) {
	require.Equal(t, []int{0, 1, 6, 7}, CPPositions(8, 2, 0))
	require.Equal(t, []int{2, 3, 4, 5}, CPPositions(8, 2, 1))
	require.Equal(t, []int{0, 7}, CPPositions(8, 4, 0))
	require.Equal(t, []int{3, 4}, CPPositions(8, 4, 3))
	require.Equal(t, []int{0, 1, 2}, CPPositions(3, 1, 0))
	require.Panics(t, func() { CPPositions(6, 2, 0) })
}
