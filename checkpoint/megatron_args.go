package checkpoint

import (
	"fmt"
	"strings"

	"github.com/nlpodyssey/gopickle/types"

	"megago/nn"
)

// Megatron's arguments (the argparse.Namespace saved as "args" in every rank's file) and
// the GPTConfig they describe.

// megatronArgs reads fields of Megatron's argparse.Namespace.
type megatronArgs struct{ ns any }

func (a megatronArgs) get(name string) (any, bool) {
	v, ok := attr(a.ns, name)
	return v, ok && v != nil
}

func (a megatronArgs) int(name string, def int) int {
	if v, ok := a.get(name); ok {
		if i, ok := pyInt(v); ok {
			return i
		}
	}
	return def
}

func (a megatronArgs) float(name string, def float64) float64 {
	if v, ok := a.get(name); ok {
		switch x := v.(type) {
		case float64:
			return x
		case int:
			return float64(x)
		}
	}
	return def
}

// flag returns a boolean argument, def when it is absent (or None).
func (a megatronArgs) flag(name string, def bool) bool {
	v, ok := a.get(name)
	if b, isBool := v.(bool); ok && isBool {
		return b
	}
	return def
}

func (a megatronArgs) bool(name string) bool { return a.flag(name, false) }

func (a megatronArgs) string(name, def string) string {
	if v, ok := a.get(name); ok {
		if s, ok := v.(string); ok {
			return s
		}
	}
	return def
}

// bias reports whether the linear layers have biases: add_bias_linear (Megatron's
// default true), or the negation of an older checkpoint's disable_bias_linear, as
// Megatron's load_args_from_checkpoint reads it.
func (a megatronArgs) bias() bool {
	if _, ok := a.get("disable_bias_linear"); ok {
		return !a.bool("disable_bias_linear")
	}
	return a.flag("add_bias_linear", true)
}

// megatronActivation returns the MLP nonlinearity Megatron computes for a model with
// arguments a; legacy says the state dict holds the legacy (pre-core) model.
//
// Megatron-core never reads --openai-gelu: its MLP's activation is F.gelu (erf), except
// that with biases and the bias-GeLU fusion (--bias-gelu-fusion, on by default, turned
// off by --no-bias-gelu-fusion and by --disable-bias-linear) it adds the bias and applies
// GeLU in one jitted function, bias_gelu_impl, which is the tanh approximation; Transformer
// Engine's activation (use_te_activation_func) is tanh too. The legacy model used
// openai_gelu (tanh) first, then onnx_safe (erf), then the same fusion rule.
func megatronActivation(a megatronArgs, legacy bool) (nn.Activation, error) {
	switch {
	case a.bool("swiglu"):
		return nn.SwiGLU, nil
	case a.bool("squared_relu"):
		return 0, fmt.Errorf("squared_relu (megago has no squared ReLU)")
	case a.bool("quick_geglu"):
		return 0, fmt.Errorf("quick_geglu (megago has no quick GeGLU)")
	case legacy && a.bool("openai_gelu"):
		return nn.GeLU, nil
	case legacy && a.bool("onnx_safe"):
		return nn.GeLUErf, nil
	case !legacy && a.bool("use_te_activation_func"):
		return nn.GeLU, nil
	case a.bias() && a.flag("bias_gelu_fusion", true):
		return nn.GeLU, nil
	}
	return nn.GeLUErf, nil
}

// megatronRefused lists boolean or set arguments describing models megago's GPT does not
// have, with the reason each names.
var megatronRefused = []struct{ arg, reason, neutral string }{
	{"apply_residual_connection_post_layernorm", "the residual taken after the norm", ""},
	{"apply_layernorm_1p", "zero-centered norm weights (layernorm_zero_centered_gamma)", ""},
	{"layernorm_zero_centered_gamma", "zero-centered norm weights", ""},
	{"rotary_interleaved", "interleaved rotary embeddings (megago rotates halves)", ""},
	{"qk_l2_norm", "L2 query/key norms", ""},
	{"multi_latent_attention", "multi-latent attention", ""},
	{"num_experts", "mixture of experts", ""},
	{"mtp_num_layers", "multi-token prediction layers", ""},
	{"hybrid_layer_pattern", "a hybrid (Mamba) layer pattern", ""},
	{"hybrid_override_pattern", "a hybrid (Mamba) layer pattern", ""},
	{"heterogeneous_layers_config_path", "heterogeneous layers", ""},
	{"window_size", "sliding-window attention", ""},
	{"rotary_seq_len_interpolation_factor", "rotary position interpolation", "1"},
	{"decoder_first_pipeline_num_layers", "an uneven pipeline split", ""},
	{"decoder_last_pipeline_num_layers", "an uneven pipeline split", ""},
	{"account_for_embedding_in_pipeline_split", "an uneven pipeline split", ""},
	{"account_for_loss_in_pipeline_split", "an uneven pipeline split", ""},
	{"pipeline_model_parallel_layout", "a custom pipeline layout", ""},
}

// argSet reports whether an argument's value turns its feature on: true, a nonzero
// number, a non-empty string or container, any other object.
func argSet(v any) bool {
	switch x := v.(type) {
	case bool:
		return x
	case int:
		return x != 0
	case float64:
		return x != 0
	case string:
		return x != ""
	case *types.Tuple:
		return x.Len() > 0
	case *types.List:
		return x.Len() > 0
	}
	return true
}

// megatronConfig returns the GPTConfig that Megatron's arguments describe, or an error
// naming every argument megago's GPT cannot take and why. legacy says the state dict
// holds the legacy (pre-core) model.
func megatronConfig(a megatronArgs, vocab int, info *MegatronInfo, legacy bool) (nn.GPTConfig, error) {
	var bad []string
	need := func(name string) int {
		v := a.int(name, 0)
		if v < 1 {
			bad = append(bad, name+" missing")
		}
		return v
	}
	bias := a.bias()
	c := nn.GPTConfig{TransformerConfig: nn.TransformerConfig{
		NumLayers: need("num_layers"), Hidden: need("hidden_size"), Heads: need("num_attention_heads"),
		FFNHidden: a.int("ffn_hidden_size", 0), HeadSize: a.int("kv_channels", 0),
		MaxPosition: a.int("max_position_embeddings", 0), Bias: bias,
		QKVBias: !bias && a.bool("add_qkv_bias"), QKNorm: a.bool("qk_layernorm"),
		NormEps:   a.float("norm_epsilon", a.float("layernorm_epsilon", 1e-5)),
		RoPETheta: a.float("rotary_base", 10000),
		Dropout:   a.float("hidden_dropout", 0), AttnDropout: a.float("attention_dropout", 0),
		InitStd: a.float("init_method_std", 0),
	}, Untied: a.bool("untie_embeddings_and_output_weights"), VocabMultiple: a.int("make_vocab_size_divisible_by", 128)}
	if a.bool("group_query_attention") {
		if c.KVHeads = a.int("num_query_groups", 0); c.KVHeads < 1 {
			bad = append(bad, "group_query_attention without num_query_groups")
		}
	}
	info.PaddedVocab = a.int("padded_vocab_size", info.PaddedVocab)
	info.Vocab = vocab
	if info.Vocab == 0 {
		info.Vocab = a.int("vocab_size", info.PaddedVocab)
	}
	if info.PaddedVocab < 1 || info.Vocab < 1 || info.Vocab > info.PaddedVocab {
		bad = append(bad, fmt.Sprintf("vocabulary %d of padded %d", info.Vocab, info.PaddedVocab))
	}
	c.Vocab = info.Vocab
	switch n := a.string("normalization", "LayerNorm"); n {
	case "LayerNorm":
		c.Norm = nn.LayerNormKind
	case "RMSNorm":
		c.Norm = nn.RMSNormKind
	default:
		bad = append(bad, "normalization "+n)
	}
	var err error
	if c.Activation, err = megatronActivation(a, legacy); err != nil {
		bad = append(bad, err.Error())
	}
	bad = append(bad, megatronPositions(a, &c.TransformerConfig)...)
	for _, r := range megatronRefused {
		if v, ok := a.get(r.arg); ok && argSet(v) && fmt.Sprint(v) != r.neutral {
			bad = append(bad, fmt.Sprintf("%s=%v (%s)", r.arg, v, r.reason))
		}
	}
	for _, f := range []string{"virtual_pipeline_model_parallel_size", "expert_model_parallel_size"} {
		if n := a.int(f, 1); n > 1 {
			bad = append(bad, fmt.Sprintf("%s=%d (not supported)", f, n))
		}
	}
	if len(bad) > 0 {
		return c, fmt.Errorf("Megatron arguments megago's GPT cannot take: %s", strings.Join(bad, ", "))
	}
	c.TransformerConfig = c.TransformerConfig.Defaults()
	if err := c.Validate(); err != nil {
		return c, fmt.Errorf("Megatron arguments num_layers=%d hidden_size=%d num_attention_heads=%d num_query_groups=%d kv_channels=%d ffn_hidden_size=%d: %w",
			c.NumLayers, c.Hidden, c.Heads, c.KVHeads, c.HeadSize, c.FFNHidden, err)
	}
	return c, nil
}

// megatronPositions sets c's position encoding from the arguments and returns what it
// cannot take.
func megatronPositions(a megatronArgs, c *nn.TransformerConfig) []string {
	p := a.string("position_embedding_type", "learned_absolute")
	if _, ok := a.get("position_embedding_type"); !ok && a.bool("use_rotary_position_embeddings") {
		p = "rope" // the legacy argument, as Megatron's validate_args reads it
	}
	switch p {
	case "learned_absolute":
		c.Position = nn.LearnedPositions
	case "none":
		c.Position = nn.NoPositions
	case "rope":
		c.Position = nn.RoPE
		if r := a.float("rotary_percent", 1); r != 1 {
			c.RotaryPercent = r
		}
		if a.bool("use_rope_scaling") {
			c.RoPEScaling = a.float("rope_scaling_factor", 8)
		}
	default:
		return []string{"position_embedding_type " + p}
	}
	return nil
}
