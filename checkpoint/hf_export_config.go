package checkpoint

import (
	"fmt"
	"maps"
	"strings"

	"megago/nn"
)

// Writing a GPT's config.json as transformers writes it for GPT-2, Llama and Qwen2.

// hfConfigKeys are the config.json keys that transformers' save_pretrained writes for
// each model type megago exports a GPT as. save_pretrained writes
// PretrainedConfig.to_diff_dict() (src/transformers/configuration_utils.py, transformers
// 4): every attribute the base class PretrainedConfig lacks, that is every argument of
// the model's config class, and of the base class's attributes those that differ from
// PretrainedConfig's defaults or from the class's own: model_type, architectures and
// torch_dtype (save_pretrained sets them), bos_token_id and eos_token_id where the class
// has defaults for them (GPT-2, Llama), tie_word_embeddings where the class's default
// (false for Llama and Qwen2) differs from the base's (true), and GPT-2's only when it
// is false. transformers_version, which records the writing library, is left out:
// megago is not transformers, and transformers reads a config without it. The classes
// read (github.com/huggingface/transformers):
//
//	gpt2   src/transformers/models/gpt2/configuration_gpt2.py at 1c70522e01cdf5fcc6ebda6c372ee0198d557c53
//	llama  src/transformers/models/llama/configuration_llama.py at 4bdeeced9ce971bed8cca7ab203c3b70cffab4ca
//	qwen2  src/transformers/models/qwen2/configuration_qwen2.py at caa3177646255d2cf73626315c8582722af4749c
//
// Mistral (configuration_mistral.py at 0b07a74c673bdf8fbd472a1c7df139b357495414) is
// imported, not exported: without a sliding window it is a Llama, and exports as one.
//
// The keys of qwen3, mixtral, qwen2_moe and qwen3_moe are the arguments of Qwen3Config,
// MixtralConfig, Qwen2MoeConfig and Qwen3MoeConfig as of transformers 4.51 (not read at
// a pinned commit), checked against the published config.json files of
// testdata/hfmoe/configs: those hold the same keys but transformers_version, the Qwen
// models' token ids (their classes have no defaults for them) and the keys the older
// versions that wrote them lacked (Mixtral-8x7B's head_dim and router_jitter_noise,
// Qwen1.5-MoE-A2.7B's and Qwen2-57B-A14B's mlp_only_layers and rope_scaling).
var hfConfigKeys = map[string][]string{
	"gpt2": {"activation_function", "architectures", "attn_pdrop", "bos_token_id", "embd_pdrop", "eos_token_id",
		"initializer_range", "layer_norm_epsilon", "model_type", "n_embd", "n_head", "n_inner", "n_layer",
		"n_positions", "reorder_and_upcast_attn", "resid_pdrop", "scale_attn_by_inverse_layer_idx",
		"scale_attn_weights", "summary_activation", "summary_first_dropout", "summary_proj_to_labels",
		"summary_type", "summary_use_proj", "torch_dtype", "use_cache", "vocab_size"},
	"llama": {"architectures", "attention_bias", "attention_dropout", "bos_token_id", "eos_token_id", "head_dim",
		"hidden_act", "hidden_size", "initializer_range", "intermediate_size", "max_position_embeddings",
		"mlp_bias", "model_type", "num_attention_heads", "num_hidden_layers", "num_key_value_heads",
		"pretraining_tp", "rms_norm_eps", "rope_scaling", "rope_theta", "tie_word_embeddings", "torch_dtype",
		"use_cache", "vocab_size"},
	"qwen2": {"architectures", "attention_dropout", "hidden_act", "hidden_size", "initializer_range",
		"intermediate_size", "layer_types", "max_position_embeddings", "max_window_layers", "model_type",
		"num_attention_heads", "num_hidden_layers", "num_key_value_heads", "rms_norm_eps", "rope_scaling",
		"rope_theta", "sliding_window", "tie_word_embeddings", "torch_dtype", "use_cache", "use_sliding_window",
		"vocab_size"},
	"qwen3": {"architectures", "attention_bias", "attention_dropout", "head_dim", "hidden_act", "hidden_size",
		"initializer_range", "intermediate_size", "max_position_embeddings", "max_window_layers", "model_type",
		"num_attention_heads", "num_hidden_layers", "num_key_value_heads", "rms_norm_eps", "rope_scaling",
		"rope_theta", "sliding_window", "tie_word_embeddings", "torch_dtype", "use_cache", "use_sliding_window",
		"vocab_size"},
	"mixtral": {"architectures", "attention_dropout", "bos_token_id", "eos_token_id", "head_dim", "hidden_act",
		"hidden_size", "initializer_range", "intermediate_size", "max_position_embeddings", "model_type",
		"num_attention_heads", "num_experts_per_tok", "num_hidden_layers", "num_key_value_heads",
		"num_local_experts", "output_router_logits", "rms_norm_eps", "rope_theta", "router_aux_loss_coef",
		"router_jitter_noise", "sliding_window", "tie_word_embeddings", "torch_dtype", "use_cache", "vocab_size"},
	"qwen2_moe": {"architectures", "attention_dropout", "decoder_sparse_step", "hidden_act", "hidden_size",
		"initializer_range", "intermediate_size", "max_position_embeddings", "max_window_layers", "mlp_only_layers",
		"model_type", "moe_intermediate_size", "norm_topk_prob", "num_attention_heads", "num_experts",
		"num_experts_per_tok", "num_hidden_layers", "num_key_value_heads", "output_router_logits", "rms_norm_eps",
		"rope_scaling", "rope_theta", "router_aux_loss_coef", "shared_expert_intermediate_size", "sliding_window",
		"tie_word_embeddings", "torch_dtype", "use_cache", "use_sliding_window", "vocab_size"},
	"qwen3_moe": {"architectures", "attention_bias", "attention_dropout", "decoder_sparse_step", "head_dim",
		"hidden_act", "hidden_size", "initializer_range", "intermediate_size", "max_position_embeddings",
		"max_window_layers", "mlp_only_layers", "model_type", "moe_intermediate_size", "norm_topk_prob",
		"num_attention_heads", "num_experts", "num_experts_per_tok", "num_hidden_layers", "num_key_value_heads",
		"output_router_logits", "rms_norm_eps", "rope_scaling", "rope_theta", "router_aux_loss_coef",
		"sliding_window", "tie_word_embeddings", "torch_dtype", "use_cache", "use_sliding_window", "vocab_size"},
}

// gptHFConfig completes the config.json fields cfg of a GPT of configuration c as the
// model type gptHFType names, with the keys of hfConfigKeys but torch_dtype, which
// ExportHF adds. The token ids (bos_token_id, eos_token_id) are null: megago's model does
// not know its tokenizer.
func gptHFConfig(c nn.GPTConfig, cfg map[string]any) error {
	kind, err := gptHFType(c)
	if err != nil {
		return err
	}
	switch kind {
	case "gpt2":
		gpt2HFConfig(c, cfg)
	case "llama":
		llamaHFConfig(c, cfg)
	case "qwen2":
		llamaHFConfig(c, cfg)
		qwen2HFConfig(c, cfg)
	case "qwen3":
		llamaHFConfig(c, cfg)
		qwen3HFConfig(c, cfg)
	default:
		moeHFConfig(kind, c, cfg)
	}
	return nil
}

// gptHFType returns the Hugging Face model type a GPT of configuration c exports as:
// gpt2; llama; qwen2 (a Llama with a QKV bias); qwen3 (a Llama with query/key norms);
// with experts mixtral, qwen2_moe or qwen3_moe (moeHFType). It refuses a GPT that is
// none of them.
func gptHFType(c nn.GPTConfig) (string, error) {
	gpt2 := c.Position == nn.LearnedPositions && c.Norm == nn.LayerNormKind && c.Bias && !c.PostLN &&
		c.KVHeads == c.Heads && c.HeadSize*c.Heads == c.Hidden && (c.Activation == nn.GeLU || c.Activation == nn.GeLUErf)
	llama := c.Position == nn.RoPE && c.Norm == nn.RMSNormKind && !c.Bias && !c.PostLN && c.Activation == nn.SwiGLU
	var extra []string // Megatron variants the exported config would not describe
	for _, v := range []struct {
		on   bool
		name string
	}{{c.QKNorm && !(llama && !c.QKVBias), "query/key norms outside a Qwen3-style model (Llama-style, no QKV bias)"},
		{c.QKVBias && !c.Bias && !llama, "a QKV bias alone outside a Llama-style model"},
		{c.RotaryPercent != 0 && c.RotaryPercent != 1, "partial rotary embeddings"},
		{c.RoPEScaling != 0 && !llama, "Llama 3.1 rope scaling outside a Llama-style model"},
		{c.QKVBias && c.HeadSize*c.Heads != c.Hidden, fmt.Sprintf("a QKV bias (Qwen2) and HeadSize %d × Heads %d ≠ Hidden %d (Qwen2's config has no head_dim)",
			c.HeadSize, c.Heads, c.Hidden)},
		{c.MoE.NumExperts > 0 && !llama, "experts outside a Llama-style model"}} {
		if v.on {
			extra = append(extra, v.name)
		}
	}
	if len(extra) > 0 {
		return "", fmt.Errorf("checkpoint: Hugging Face export of a GPT with %s is not implemented", strings.Join(extra, ", "))
	}
	switch {
	case gpt2:
		return "gpt2", nil
	case !llama:
		return "", fmt.Errorf("checkpoint: this GPT has no Hugging Face equivalent (GPT-2 needs learned positions, LayerNorm, biases and GeLU; Llama RoPE, RMSNorm, SwiGLU and no biases)")
	case c.MoE.NumExperts > 0:
		return moeHFType(c)
	case c.QKVBias:
		return "qwen2", nil
	case c.QKNorm:
		return "qwen3", nil
	}
	return "llama", nil
}

// gpt2HFConfig sets GPT2Config's keys; the summary_* keys (GPT2DoubleHeadsModel's) have
// GPT2Config's defaults.
func gpt2HFConfig(c nn.GPTConfig, cfg map[string]any) {
	maps.Copy(cfg, map[string]any{"model_type": "gpt2", "architectures": []string{"GPT2LMHeadModel"},
		"vocab_size": c.Vocab, "n_embd": c.Hidden, "n_inner": c.FFNHidden, "n_layer": c.NumLayers,
		"n_head": c.Heads, "n_positions": c.MaxPosition, "layer_norm_epsilon": c.NormEps,
		"activation_function": "gelu_new", "initializer_range": c.InitStd,
		"resid_pdrop": c.Dropout, "embd_pdrop": c.Dropout, "attn_pdrop": c.AttnDropout,
		"bos_token_id": nil, "eos_token_id": nil, "use_cache": true,
		"scale_attn_weights": true, "scale_attn_by_inverse_layer_idx": false, "reorder_and_upcast_attn": false,
		"summary_type": "cls_index", "summary_use_proj": true, "summary_activation": nil,
		"summary_proj_to_labels": true, "summary_first_dropout": 0.1})
	if c.Activation == nn.GeLUErf {
		cfg["activation_function"] = "gelu"
	}
	delete(cfg, "tie_word_embeddings")
	if c.Untied { // GPT2Config's default, true, is PretrainedConfig's: written only when false
		cfg["tie_word_embeddings"] = false
	}
}

// llamaHFConfig sets LlamaConfig's keys, with Llama 3.1's rope_scaling when c has it.
func llamaHFConfig(c nn.GPTConfig, cfg map[string]any) {
	var scaling map[string]any
	if c.RoPEScaling != 0 {
		scaling = map[string]any{"rope_type": "llama3", "factor": c.RoPEScaling, "low_freq_factor": float64(llama3LowFreqFactor),
			"high_freq_factor": float64(llama3HighFreqFactor), "original_max_position_embeddings": llama3OldContext}
	}
	maps.Copy(cfg, map[string]any{"model_type": "llama", "architectures": []string{"LlamaForCausalLM"},
		"vocab_size": c.Vocab, "hidden_size": c.Hidden, "intermediate_size": c.FFNHidden,
		"num_hidden_layers": c.NumLayers, "num_attention_heads": c.Heads, "num_key_value_heads": c.KVHeads,
		"head_dim": c.HeadSize, "hidden_act": "silu", "max_position_embeddings": c.MaxPosition,
		"initializer_range": c.InitStd, "rms_norm_eps": c.NormEps, "use_cache": true, "pretraining_tp": 1,
		"bos_token_id": nil, "eos_token_id": nil, "tie_word_embeddings": !c.Untied,
		"rope_theta": c.RoPETheta, "rope_scaling": scaling,
		"attention_bias": false, "attention_dropout": c.AttnDropout, "mlp_bias": false})
}

// qwen3HFConfig turns llamaHFConfig's keys into Qwen3Config's: no token ids, no
// pretraining_tp or mlp_bias; full attention in every layer.
func qwen3HFConfig(c nn.GPTConfig, cfg map[string]any) {
	for _, k := range []string{"pretraining_tp", "bos_token_id", "eos_token_id", "mlp_bias"} {
		delete(cfg, k)
	}
	maps.Copy(cfg, map[string]any{"model_type": "qwen3", "architectures": []string{"Qwen3ForCausalLM"},
		"use_sliding_window": false, "sliding_window": nil, "max_window_layers": c.NumLayers})
}

// qwen2HFConfig turns llamaHFConfig's keys into Qwen2Config's: no head_dim, no biases
// keys (q, k and v always have one), no token ids; full attention in every layer.
func qwen2HFConfig(c nn.GPTConfig, cfg map[string]any) {
	for _, k := range []string{"head_dim", "pretraining_tp", "bos_token_id", "eos_token_id", "attention_bias", "mlp_bias"} {
		delete(cfg, k)
	}
	layers := make([]string, c.NumLayers)
	for i := range layers {
		layers[i] = "full_attention"
	}
	maps.Copy(cfg, map[string]any{"model_type": "qwen2", "architectures": []string{"Qwen2ForCausalLM"},
		"use_sliding_window": false, "sliding_window": nil, "max_window_layers": c.NumLayers, "layer_types": layers})
}
