package checkpoint

import (
	"fmt"
	"math"
	"slices"

	"megago/nn"
)

// Reading a Hugging Face config.json: the model types megago imports and the settings it
// refuses. Every refusal names the key and its value.

// hfFields reads config.json values, collecting what is missing or refused in errs.
type hfFields struct {
	m    map[string]any
	errs []string
	// prefix is prepended to the keys in messages ("rope_scaling." for a nested map).
	prefix string
}

// refuse records a setting megago does not implement: key = value (why).
func (f *hfFields) refuse(key string, value any, why string) {
	if s, ok := value.(string); ok {
		value = fmt.Sprintf("%q", s)
	}
	f.errs = append(f.errs, fmt.Sprintf("%s%s = %v (%s)", f.prefix, key, value, why))
}

func (f *hfFields) num(key string, def float64) float64 {
	v, ok := f.m[key]
	if !ok || v == nil {
		if math.IsNaN(def) {
			f.errs = append(f.errs, f.prefix+key+" missing")
		}
		return def
	}
	x, ok := v.(float64)
	if !ok {
		f.errs = append(f.errs, fmt.Sprintf("%s%s = %v is not a number", f.prefix, key, v))
	}
	return x
}

func (f *hfFields) int(key string, def int) int {
	d := float64(def)
	if def < 0 {
		d = math.NaN()
	}
	x := f.num(key, d)
	if math.IsNaN(x) {
		return 0
	}
	if x != math.Trunc(x) || math.Abs(x) > 1<<53 {
		f.errs = append(f.errs, fmt.Sprintf("%s%s = %v is not an integer", f.prefix, key, x))
		return 0
	}
	return int(x)
}

func (f *hfFields) str(key, def string) string {
	if v, ok := f.m[key].(string); ok {
		return v
	}
	return def
}

func (f *hfFields) bool(key string, def bool) bool {
	if v, ok := f.m[key].(bool); ok {
		return v
	}
	return def
}

// required marks an integer field without a default.
const required = -1

// ModelFromHFConfig returns the Model that a Hugging Face config.json describes: GPT-2
// (model_type gpt2), Llama 1, 2, 3 and 3.1 (llama), Mistral without sliding-window
// attention (mistral), Qwen2 (qwen2), Qwen3 (qwen3), the mixtures of experts Mixtral
// (mixtral), Qwen2-MoE (qwen2_moe) and Qwen3-MoE (qwen3_moe), BERT (bert) or T5 v1.0
// (t5). Settings megago does not implement are errors naming each key and its value.
func ModelFromHFConfig(cfg map[string]any) (Model, error) {
	f := &hfFields{m: cfg}
	var m Model
	switch t := f.str("model_type", ""); t {
	case "gpt2":
		m = f.gpt2()
	case "llama", "mistral", "qwen2", "qwen3":
		m = GPTModel(f.llama(t))
	case "mixtral", "qwen2_moe", "qwen3_moe":
		m = GPTModel(f.moe(t))
	case "bert":
		m = f.bert()
	case "t5":
		m = f.t5()
	default:
		return Model{}, fmt.Errorf("model_type %q: megago imports gpt2, llama, mistral, qwen2, qwen3, mixtral, qwen2_moe, qwen3_moe, bert and t5", t)
	}
	if len(f.errs) > 0 {
		slices.Sort(f.errs)
		return Model{}, fmt.Errorf("config.json settings megago does not implement or lacks: %v", f.errs)
	}
	return m, nil
}

// activation reads an activation function's name.
func (f *hfFields) activation(key, def string) nn.Activation {
	switch a := f.str(key, def); a {
	case "gelu_new", "gelu_pytorch_tanh", "gelu_fast":
		return nn.GeLU
	case "gelu":
		return nn.GeLUErf
	case "relu":
		return nn.ReLU
	default:
		f.errs = append(f.errs, key+" "+a)
	}
	return 0
}

// gpt2 reads GPT2Config.
func (f *hfFields) gpt2() Model {
	c := nn.GPTConfig{TransformerConfig: nn.TransformerConfig{NumLayers: f.int("n_layer", required),
		Hidden: f.int("n_embd", required), Heads: f.int("n_head", required), FFNHidden: f.int("n_inner", 0),
		Vocab: f.int("vocab_size", required), MaxPosition: f.int("n_positions", required),
		NormEps: f.num("layer_norm_epsilon", 1e-5), Bias: true, Activation: f.activation("activation_function", "gelu_new")},
		Untied: !f.bool("tie_word_embeddings", true)}
	if v := f.bool("scale_attn_by_inverse_layer_idx", false); v {
		f.refuse("scale_attn_by_inverse_layer_idx", v, "attention scores are scaled by 1/√HS only")
	}
	if v := f.bool("scale_attn_weights", true); !v {
		f.refuse("scale_attn_weights", v, "attention scores are always scaled by 1/√HS")
	}
	return GPTModel(c)
}

// llama reads LlamaConfig, MistralConfig, Qwen2Config or Qwen3Config, or the attention
// and dense MLP settings of MixtralConfig, Qwen2MoeConfig or Qwen3MoeConfig (model type
// kind): RoPE, RMSNorm, SwiGLU, grouped-query attention, no biases but Qwen2's on q, k
// and v, Qwen3's query/key norms.
func (f *hfFields) llama(kind string) nn.GPTConfig {
	heads := f.int("num_attention_heads", required)
	c := nn.LlamaConfig(f.int("num_hidden_layers", required), f.int("hidden_size", required), heads,
		f.int("num_key_value_heads", heads), f.int("intermediate_size", required), f.int("vocab_size", required))
	c.NormEps = f.num("rms_norm_eps", 1e-6)
	c.HeadSize, c.MaxPosition = f.int("head_dim", 0), f.int("max_position_embeddings", 0)
	c.Untied = !f.bool("tie_word_embeddings", false)
	if std := f.num("initializer_range", 0.02); std > 0 {
		c.InitStd = std
	}
	if a := f.str("hidden_act", "silu"); a != "silu" {
		f.errs = append(f.errs, "hidden_act "+a)
	}
	for _, key := range []string{"attention_bias", "mlp_bias"} {
		if v := f.bool(key, false); v {
			f.refuse(key, v, "Llama-style models have no biases but Qwen2's on q, k and v")
		}
	}
	c.RoPETheta, c.RoPEScaling = f.rope()
	if c.KVHeads < 1 || heads%c.KVHeads != 0 {
		f.refuse("num_key_value_heads", c.KVHeads, fmt.Sprintf("must divide num_attention_heads %d: each key/value head serves a group of query heads", heads))
	}
	hs := c.HeadSize
	if hs == 0 && heads > 0 {
		hs = c.Hidden / heads
	}
	if hs%2 != 0 {
		f.refuse("head_dim", f.m["head_dim"], fmt.Sprintf("with hidden_size %d and num_attention_heads %d: RoPE needs an even head size", c.Hidden, heads))
	}
	switch kind {
	case "mistral", "mixtral":
		f.slidingWindow("sliding_window", c.MaxPosition)
	case "qwen2", "qwen2_moe":
		c.QKVBias = true
		f.qwen2Window(c.NumLayers)
	case "qwen3", "qwen3_moe":
		c.QKNorm = true // q_norm and k_norm: RMSNorm over each head's head_dim channels
		f.qwen2Window(c.NumLayers)
	}
	return c
}

// slidingWindow accepts a sliding window that no sequence of maxPosition tokens reaches
// (null, or at least maxPosition) and refuses a shorter one.
func (f *hfFields) slidingWindow(key string, maxPosition int) {
	v, ok := f.m[key]
	if !ok || v == nil {
		return
	}
	if w := f.int(key, 0); w < maxPosition || maxPosition <= 0 {
		f.refuse(key, v, fmt.Sprintf("sliding-window attention is not implemented; a window of at least max_position_embeddings %d is accepted", maxPosition))
	}
}

// qwen2Window refuses a Qwen2 of which a layer uses sliding-window attention:
// use_sliding_window with max_window_layers below num_hidden_layers, or a layer_types
// entry that is not full_attention.
func (f *hfFields) qwen2Window(layers int) {
	if types, ok := f.m["layer_types"].([]any); ok {
		for i, t := range types {
			if t != "full_attention" {
				f.refuse(fmt.Sprintf("layer_types[%d]", i), t, "only full_attention is implemented")
				return
			}
		}
	}
	if v := f.bool("use_sliding_window", false); v {
		if n := f.int("max_window_layers", 28); n < layers {
			f.refuse("use_sliding_window", v, fmt.Sprintf("with max_window_layers %d < num_hidden_layers %d: sliding-window attention is not implemented", n, layers))
		}
	}
}

// Llama 3.1's rope scaling parameters that nn implements (nn.TransformerConfig.RoPEScaling
// takes the factor; the rest are fixed).
const (
	llama3LowFreqFactor  = 1
	llama3HighFreqFactor = 4
	llama3OldContext     = 8192
)

// rope reads rope_theta and rope_scaling (transformers 4) or rope_parameters
// (transformers 5): the rotary base and Llama 3.1's scaling factor (0 for none).
func (f *hfFields) rope() (theta, factor float64) {
	theta = f.num("rope_theta", 10000)
	key := "rope_scaling"
	if _, ok := f.m["rope_parameters"]; ok {
		key = "rope_parameters"
	}
	raw, ok := f.m[key]
	if !ok || raw == nil {
		return theta, 0
	}
	m, ok := raw.(map[string]any)
	if !ok {
		f.refuse(key, raw, "not an object")
		return theta, 0
	}
	g := &hfFields{m: m, prefix: key + "."}
	defer func() { f.errs = append(f.errs, g.errs...) }()
	if key == "rope_parameters" {
		theta = g.num("rope_theta", theta)
	}
	typeKey := "rope_type"
	if _, ok := m[typeKey]; !ok {
		typeKey = "type"
	}
	switch t := g.str(typeKey, "default"); t {
	case "default":
		return theta, 0
	case "llama3":
	default:
		g.refuse(typeKey, t, "megago implements default and llama3 rotary embeddings")
		return theta, 0
	}
	factor = g.num("factor", math.NaN())
	if !(factor > 0) || math.IsInf(factor, 0) {
		g.refuse("factor", m["factor"], "want a positive number")
		return theta, 0
	}
	for _, p := range []struct {
		key  string
		want float64
	}{{"low_freq_factor", llama3LowFreqFactor}, {"high_freq_factor", llama3HighFreqFactor},
		{"original_max_position_embeddings", llama3OldContext}} {
		if v := g.num(p.key, math.NaN()); v != p.want && !math.IsNaN(v) {
			g.refuse(p.key, m[p.key], fmt.Sprintf("megago's llama3 scaling has %v, as Llama 3.1", p.want))
		}
	}
	return theta, factor
}

// bert reads BertConfig.
func (f *hfFields) bert() Model {
	c := nn.NewBERTConfig(f.int("num_hidden_layers", required), f.int("hidden_size", required),
		f.int("num_attention_heads", required), f.int("vocab_size", required), f.int("max_position_embeddings", required))
	c.FFNHidden, c.NormEps, c.TypeVocab = f.int("intermediate_size", 0), f.num("layer_norm_eps", 1e-12), f.int("type_vocab_size", 2)
	c.Activation = f.activation("hidden_act", "gelu")
	c.Dropout, c.AttnDropout = f.num("hidden_dropout_prob", 0.1), f.num("attention_probs_dropout_prob", 0.1)
	if archs, _ := f.m["architectures"].([]any); len(archs) > 0 && archs[0] == "BertForMaskedLM" {
		c.NoBinaryHead = true
	}
	if p := f.str("position_embedding_type", "absolute"); p != "absolute" {
		f.errs = append(f.errs, "position_embedding_type "+p)
	}
	return BERTModel(c)
}

// t5 reads T5Config (T5 v1.0).
func (f *hfFields) t5() Model {
	c := nn.NewT5Config(f.int("num_layers", required), f.int("d_model", required), f.int("num_heads", required),
		f.int("d_kv", required), f.int("d_ff", required), f.int("vocab_size", required))
	c.DecoderLayers = f.int("num_decoder_layers", 0)
	c.RelativeBuckets, c.RelativeMaxDistance = f.int("relative_attention_num_buckets", 32), f.int("relative_attention_max_distance", 128)
	c.NormEps, c.Dropout = f.num("layer_norm_epsilon", 1e-6), f.num("dropout_rate", 0.1)
	c.AttnDropout = c.Dropout
	if p := f.str("feed_forward_proj", "relu"); p != "relu" || !f.bool("tie_word_embeddings", true) {
		f.errs = append(f.errs, "feed_forward_proj "+p+" or untied embeddings (T5 v1.1)")
	}
	return T5Model(c)
}
