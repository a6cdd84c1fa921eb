package nn

import (
	"errors"
	"fmt"
	"math"
	"strings"
)

// Norm selects the normalization layer.
type Norm uint8

// Norms.
const (
	LayerNormKind Norm = iota // torch.nn.LayerNorm (mean and variance, weight and bias)
	RMSNormKind               // RMSNorm (Llama, T5): no mean, no bias
)

// Activation selects the MLP's nonlinearity.
type Activation uint8

// Activations.
const (
	GeLU    Activation = iota // tanh approximation (GPT-2, Megatron)
	GeLUErf                   // exact erf form (BERT)
	ReLU                      // T5 v1.0
	SwiGLU                    // silu(x·Wg)·(x·Wu) (Llama)
)

// Position selects how positions enter the model.
type Position uint8

// Position encodings.
const (
	LearnedPositions  Position = iota // an embedding table added to the input (GPT-2, BERT)
	RoPE                              // rotary embeddings of q and k (Llama)
	RelativePositions                 // T5's bucketed relative attention bias
	NoPositions                       // no position information (Megatron's --position-embedding-type none)
)

// TransformerConfig describes a transformer. Zero values mean the documented defaults
// (applied by Defaults); Validate reports every field that cannot work.
type TransformerConfig struct {
	NumLayers   int // L
	Hidden      int // C
	Heads       int // NH
	KVHeads     int // query groups for grouped-query attention; 0 means Heads (multi-head)
	HeadSize    int // HS; 0 means Hidden/Heads
	FFNHidden   int // F; 0 means 4·Hidden
	Vocab       int // V, the tokenizer's vocabulary size
	MaxPosition int // learned position table size

	Norm       Norm
	Activation Activation
	Position   Position
	PostLN     bool    // normalize after each residual add (BERT) instead of before (GPT)
	Bias       bool    // biases in linear layers
	NormEps    float64 // 0 means 1e-5
	RoPETheta  float64 // 0 means 10000

	// Megatron's Llama/Qwen variants (see rope.go and attention.go).
	//
	// RotaryPercent is the fraction of each head's HS channels that RoPE rotates (the
	// first int(HS·RotaryPercent); the rest pass unchanged), Megatron's --rotary-percent;
	// 0 means 1. RoPEScaling, if not 0, is Llama 3.1's rope-scaling factor applied to the
	// rotary frequencies as Megatron's --use-rope-scaling --rope-scaling-factor does (low
	// and high frequency factors 1 and 4, original context 8192). QKVBias gives the QKV
	// projection a bias even without Bias (Qwen2's --add-qkv-bias). QKNorm normalizes each
	// query and key head (over HS, with Norm and NormEps, weights [HS] shared by all heads)
	// before RoPE (--qk-layernorm). Their zero values are left out of JSON, so a
	// checkpoint's recorded configuration reads the same as before they existed.
	RotaryPercent float64 `json:",omitempty"`
	RoPEScaling   float64 `json:",omitempty"`
	QKVBias       bool    `json:",omitempty"`
	QKNorm        bool    `json:",omitempty"`

	// Dropout on hidden states and AttnDropout on attention probabilities, in training.
	Dropout, AttnDropout float64
	// InitStd is the std of weight initialization (0 means 0.02); the output projections
	// of attention and MLP use InitStd/√(2L).
	InitStd float64
	// NoAttentionScale disables the 1/√HS scaling of attention scores (T5).
	NoAttentionScale bool
	// RelativeBuckets and RelativeMaxDistance configure T5's position buckets (0 means 32
	// and 128).
	RelativeBuckets, RelativeMaxDistance int

	// TP is the tensor-parallel size the model will run at; CP the context-parallel size
	// (the sequence must then be a multiple of 2·CP, checked by the model's forward).
	TP, CP int

	// CPCommType is how attention exchanges keys and values over the CP group
	// (--cp-comm-type): "p2p" (the default, "" too: a ring of K/V blocks), "all_gather"
	// (or "allgather"), "a2a" (Ulysses' head/sequence all-to-all) or "a2a+p2p" (with
	// CPHierarchy), one value for every layer or a comma-separated value per layer
	// (NumLayers values).
	// CPHierarchy is --hierarchical-context-parallel-sizes, comma-separated ("2,2": a2a
	// over the inner 2 ranks, p2p over the outer 2). Strings keep the configuration
	// comparable with ==.
	CPCommType  string `json:",omitempty"`
	CPHierarchy string `json:",omitempty"`

	// MoE configures mixture-of-experts layers; the zero value means none.
	MoE MoEConfig `json:",omitzero"`
}

// Defaults returns c with zero fields replaced by their defaults.
func (c TransformerConfig) Defaults() TransformerConfig {
	if c.KVHeads == 0 {
		c.KVHeads = c.Heads
	}
	if c.HeadSize == 0 && c.Heads > 0 {
		c.HeadSize = c.Hidden / c.Heads
	}
	if c.FFNHidden == 0 {
		c.FFNHidden = 4 * c.Hidden
	}
	if c.NormEps == 0 {
		c.NormEps = 1e-5
	}
	if c.RoPETheta == 0 {
		c.RoPETheta = 10000
	}
	if c.InitStd == 0 {
		c.InitStd = 0.02
	}
	if c.RelativeBuckets == 0 {
		c.RelativeBuckets = 32
	}
	if c.RelativeMaxDistance == 0 {
		c.RelativeMaxDistance = 128
	}
	if c.TP == 0 {
		c.TP = 1
	}
	if c.CP == 0 {
		c.CP = 1
	}
	return c
}

// Validate reports, in one error, every field of c (after Defaults) that cannot work,
// naming the fields.
func (c TransformerConfig) Validate() error {
	explicitHeadSize := c.HeadSize != 0
	c = c.Defaults()
	var errs []string
	bad := func(format string, a ...any) { errs = append(errs, fmt.Sprintf(format, a...)) }
	for _, f := range []struct {
		name string
		v    int
	}{{"NumLayers", c.NumLayers}, {"Hidden", c.Hidden}, {"Heads", c.Heads}, {"Vocab", c.Vocab}, {"TP", c.TP}} {
		if f.v < 1 {
			bad("%s = %d must be ≥ 1", f.name, f.v)
		}
	}
	if c.Heads > 0 && c.Hidden > 0 && c.Hidden%c.Heads != 0 && !explicitHeadSize {
		bad("Hidden = %d not divisible by Heads = %d (set HeadSize to allow it)", c.Hidden, c.Heads)
	}
	if c.KVHeads < 1 || (c.Heads > 0 && c.Heads%c.KVHeads != 0) {
		bad("KVHeads = %d must divide Heads = %d", c.KVHeads, c.Heads)
	}
	if c.TP >= 1 {
		if c.Heads%c.TP != 0 {
			bad("Heads = %d not divisible by TP = %d", c.Heads, c.TP)
		}
		if c.KVHeads%c.TP != 0 {
			bad("KVHeads = %d not divisible by TP = %d", c.KVHeads, c.TP)
		}
		if c.FFNHidden%c.TP != 0 {
			bad("FFNHidden = %d not divisible by TP = %d", c.FFNHidden, c.TP)
		}
	}
	errs = append(errs, c.validateCP()...)
	if c.Position == LearnedPositions && c.MaxPosition < 1 {
		bad("MaxPosition = %d must be ≥ 1 with learned positions", c.MaxPosition)
	}
	if c.Dropout < 0 || c.Dropout >= 1 || c.AttnDropout < 0 || c.AttnDropout >= 1 {
		bad("Dropout = %v and AttnDropout = %v must be in [0, 1)", c.Dropout, c.AttnDropout)
	}
	if c.Activation > SwiGLU {
		bad("Activation = %d is not one of GeLU, GeLUErf, ReLU, SwiGLU", c.Activation)
	}
	if c.Position > NoPositions {
		bad("Position = %d is not one of LearnedPositions, RoPE, RelativePositions, NoPositions", c.Position)
	}
	if c.Position == RoPE && c.HeadSize%2 != 0 {
		bad("HeadSize = %d must be even with RoPE", c.HeadSize)
	}
	if c.RotaryPercent < 0 || c.RotaryPercent > 1 || math.IsNaN(c.RotaryPercent) {
		bad("RotaryPercent = %v must be in (0, 1] (0 means 1)", c.RotaryPercent)
	} else if rot := c.rotaryDim(); c.Position == RoPE && (rot < 2 || rot%2 != 0) {
		bad("RotaryPercent = %v rotates %d of HeadSize = %d channels: want an even number ≥ 2", c.RotaryPercent, rot, c.HeadSize)
	}
	if c.RoPEScaling < 0 || math.IsNaN(c.RoPEScaling) || math.IsInf(c.RoPEScaling, 0) {
		bad("RoPEScaling = %v must be finite and ≥ 0", c.RoPEScaling)
	}
	if c.MoE.NumExperts < 0 {
		bad("MoE.NumExperts = %d must be ≥ 0", c.MoE.NumExperts)
	} else if c.MoE.NumExperts > 0 {
		errs = append(errs, c.MoE.validate(c.NumLayers)...)
	}
	if len(errs) > 0 {
		return errors.New("nn: invalid TransformerConfig: " + strings.Join(errs, "; "))
	}
	return nil
}

// OutputInitStd is the std of the attention and MLP output projections: InitStd/√(2L).
func (c TransformerConfig) OutputInitStd() float64 {
	c = c.Defaults()
	return c.InitStd / math.Sqrt(2*float64(c.NumLayers))
}

// PaddedVocab returns the vocabulary size padded for TP: ceil(V / (multiple·tp))·multiple·tp,
// as Megatron's --make-vocab-size-divisible-by (default 128; multiple 0 means 128).
func PaddedVocab(vocab, multiple, tp int) int {
	if multiple == 0 {
		multiple = 128
	}
	m := multiple * tp
	return (vocab + m - 1) / m * m
}
