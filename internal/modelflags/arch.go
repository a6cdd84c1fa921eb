// Package modelflags holds Megatron-LM's command-line flags for a GPT's architecture
// variants (Llama, Mistral, Qwen2: RMSNorm, SwiGLU, RoPE and its scaling, grouped-query
// attention, biases, query/key norms; Arch) and its mixture-of-experts layers
// (--num-experts, --moe-*, the expert-parallel sizes; MoE, with --moe-layer-freq's
// Python list expressions in layer_freq.go) and its context parallelism
// (--context-parallel-size, --cp-comm-type, --hierarchical-context-parallel-sizes; CP),
// shared by the examples and megago bench gpt, and maps them onto nn.TransformerConfig.
package modelflags

import (
	"flag"
	"fmt"
	"math"
	"strings"

	"megago/nn"
)

// Arch holds the architecture flags, named and defaulted as Megatron's
// (megatron/training/arguments.py and megatron/core/transformer/transformer_config.py).
type Arch struct {
	Normalization         string  // --normalization LayerNorm|RMSNorm
	NormEpsilon           float64 // --norm-epsilon (1e-5)
	SwiGLU                bool    // --swiglu
	PositionEmbeddingType string  // --position-embedding-type learned_absolute|rope|none
	RotaryBase            int     // --rotary-base (10000)
	RotaryPercent         float64 // --rotary-percent (1.0)
	UseRopeScaling        bool    // --use-rope-scaling (Llama 3.x)
	RopeScalingFactor     float64 // --rope-scaling-factor (8.0)
	GroupQueryAttention   bool    // --group-query-attention
	NumQueryGroups        int     // --num-query-groups (0: the attention heads)
	KVChannels            int     // --kv-channels (0: hidden size / heads)
	DisableBiasLinear     bool    // --disable-bias-linear
	AddQKVBias            bool    // --add-qkv-bias (Qwen2)
	QKLayerNorm           bool    // --qk-layernorm
}

// Defaults returns Megatron's defaults: a GPT-2-style model.
func Defaults() Arch {
	return Arch{Normalization: "LayerNorm", NormEpsilon: 1e-5, PositionEmbeddingType: "learned_absolute",
		RotaryBase: 10000, RotaryPercent: 1, RopeScalingFactor: 8}
}

// Register registers the flags on fs with a's values as their defaults.
func (a *Arch) Register(fs *flag.FlagSet) {
	fs.StringVar(&a.Normalization, "normalization", a.Normalization, "LayerNorm or RMSNorm")
	fs.Float64Var(&a.NormEpsilon, "norm-epsilon", a.NormEpsilon, "ε of the norms")
	fs.BoolVar(&a.SwiGLU, "swiglu", a.SwiGLU, "SwiGLU MLP (gated SiLU; with --ffn-hidden-size unset, Megatron's ⌊(8/3·hidden)/64⌋·64)")
	fs.StringVar(&a.PositionEmbeddingType, "position-embedding-type", a.PositionEmbeddingType, "learned_absolute, rope or none")
	fs.IntVar(&a.RotaryBase, "rotary-base", a.RotaryBase, "base θ of the rotary frequencies")
	fs.Float64Var(&a.RotaryPercent, "rotary-percent", a.RotaryPercent, "fraction of each head's channels that RoPE rotates")
	fs.BoolVar(&a.UseRopeScaling, "use-rope-scaling", a.UseRopeScaling, "Llama 3.x's scaling of the rotary frequencies")
	fs.Float64Var(&a.RopeScalingFactor, "rope-scaling-factor", a.RopeScalingFactor, "factor of --use-rope-scaling")
	fs.BoolVar(&a.GroupQueryAttention, "group-query-attention", a.GroupQueryAttention, "grouped-query attention with --num-query-groups key/value heads")
	fs.IntVar(&a.NumQueryGroups, "num-query-groups", a.NumQueryGroups, "key/value heads with --group-query-attention (0: one per attention head)")
	fs.IntVar(&a.KVChannels, "kv-channels", a.KVChannels, "channels per attention head (0: hidden size / heads)")
	fs.BoolVar(&a.DisableBiasLinear, "disable-bias-linear", a.DisableBiasLinear, "no biases in the linear layers")
	fs.BoolVar(&a.AddQKVBias, "add-qkv-bias", a.AddQKVBias, "a bias in the QKV projection even with --disable-bias-linear (Qwen2)")
	fs.BoolVar(&a.QKLayerNorm, "qk-layernorm", a.QKLayerNorm, "normalize each query and key head (with --normalization) before RoPE")
}

// SwiGLUFFN returns the MLP size Megatron gives a SwiGLU model of hidden size h when
// --ffn-hidden-size is unset: int(4·h·2/3 / 64)·64.
func SwiGLUFFN(h int) int { return int(4*float64(h)*2/3/64) * 64 }

// Check returns a message for each flag value that cannot work with heads attention heads
// at tensor-parallel size tp, in the flags' words (Megatron's where it has them).
func (a Arch) Check(heads, tp int) []string {
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	if a.Normalization != "LayerNorm" && a.Normalization != "RMSNorm" {
		bad("--normalization %q: want LayerNorm or RMSNorm", a.Normalization)
	}
	if !(a.NormEpsilon > 0) || math.IsInf(a.NormEpsilon, 0) {
		bad("--norm-epsilon %v must be positive", a.NormEpsilon)
	}
	rope := a.PositionEmbeddingType == "rope"
	switch a.PositionEmbeddingType {
	case "learned_absolute", "rope", "none":
	case "yarn", "mrope", "relative":
		bad("--position-embedding-type %s is not implemented for the GPT (learned_absolute, rope or none)", a.PositionEmbeddingType)
	default:
		bad("--position-embedding-type %q: want learned_absolute, rope or none", a.PositionEmbeddingType)
	}
	if a.RotaryBase < 1 {
		bad("--rotary-base %d must be ≥ 1", a.RotaryBase)
	}
	if !(a.RotaryPercent > 0 && a.RotaryPercent <= 1) {
		bad("--rotary-percent %v must be in (0, 1]", a.RotaryPercent)
	} else if a.RotaryPercent != 1 && !rope {
		bad("--rotary-percent %v needs --position-embedding-type rope", a.RotaryPercent)
	}
	if a.UseRopeScaling && !rope {
		bad("--use-rope-scaling needs --position-embedding-type rope")
	}
	if a.UseRopeScaling && (!(a.RopeScalingFactor > 0) || math.IsInf(a.RopeScalingFactor, 0)) {
		bad("--rope-scaling-factor %v must be positive", a.RopeScalingFactor)
	}
	if a.KVChannels < 0 || a.NumQueryGroups < 0 {
		bad("--kv-channels %d and --num-query-groups %d must not be negative", a.KVChannels, a.NumQueryGroups)
	}
	if a.NumQueryGroups != 0 && !a.GroupQueryAttention {
		bad("--num-query-groups %d needs --group-query-attention (Megatron would ignore it)", a.NumQueryGroups)
	}
	if g := a.NumQueryGroups; a.GroupQueryAttention && g > 0 && heads > 0 && tp > 0 {
		if heads%g != 0 {
			bad("--num-attention-heads %d is not divisible by --num-query-groups %d", heads, g)
		}
		if g%tp != 0 {
			// Megatron also accepts a divisor of TP by replicating key/value heads; megago
			// splits whole groups.
			bad("num_query_groups (%d) must be a multiple of tensor_model_parallel_size (%d) (--num-query-groups, --tensor-model-parallel-size)", g, tp)
		}
	}
	return errs
}

// Apply sets the fields of c that the flags describe (c's sizes are the caller's).
// Call Check first.
func (a Arch) Apply(c *nn.TransformerConfig) {
	c.Norm = nn.LayerNormKind
	if a.Normalization == "RMSNorm" {
		c.Norm = nn.RMSNormKind
	}
	c.NormEps = a.NormEpsilon
	if a.SwiGLU {
		c.Activation = nn.SwiGLU
	}
	switch a.PositionEmbeddingType {
	case "rope":
		c.Position = nn.RoPE
	case "none":
		c.Position = nn.NoPositions
	default:
		c.Position = nn.LearnedPositions
	}
	c.RoPETheta = float64(a.RotaryBase)
	c.RotaryPercent = 0 // nn's "whole head", which keeps checkpoints' recorded configurations as they were
	if a.RotaryPercent != 1 {
		c.RotaryPercent = a.RotaryPercent
	}
	c.RoPEScaling = 0
	if a.UseRopeScaling {
		c.RoPEScaling = a.RopeScalingFactor
	}
	if a.GroupQueryAttention {
		c.KVHeads = a.NumQueryGroups
	}
	c.HeadSize = a.KVChannels
	c.Bias = !a.DisableBiasLinear
	c.QKVBias = a.AddQKVBias
	c.QKNorm = a.QKLayerNorm
}

// Describe returns the settings that differ from GPT-2's in a few words ("RMSNorm,
// SwiGLU, RoPE, 2 query groups, no biases"), or "" for GPT-2.
func (a Arch) Describe() string {
	d := Defaults()
	var w []string
	add := func(on bool, format string, args ...any) {
		if on {
			w = append(w, fmt.Sprintf(format, args...))
		}
	}
	add(a.Normalization != d.Normalization, "%s", a.Normalization)
	add(a.NormEpsilon != d.NormEpsilon, "ε %g", a.NormEpsilon)
	add(a.SwiGLU, "SwiGLU")
	add(a.PositionEmbeddingType == "rope", "RoPE θ %d", a.RotaryBase)
	add(a.PositionEmbeddingType == "rope" && a.RotaryPercent != 1, "on %g of each head", a.RotaryPercent)
	add(a.PositionEmbeddingType == "rope" && a.UseRopeScaling, "Llama 3 scaling ×%g", a.RopeScalingFactor)
	add(a.PositionEmbeddingType == "none", "no positions")
	add(a.GroupQueryAttention && a.NumQueryGroups > 0, "%d query groups", a.NumQueryGroups)
	add(a.KVChannels != 0, "%d channels per head", a.KVChannels)
	add(a.DisableBiasLinear && !a.AddQKVBias, "no biases")
	add(a.DisableBiasLinear && a.AddQKVBias, "biases in QKV only")
	add(a.QKLayerNorm, "query/key norms")
	return strings.Join(w, ", ")
}
