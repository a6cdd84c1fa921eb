package checkpoint

import (
	"fmt"
	"strings"
)

// The legacy (pre-core) Megatron GPT, megatron/legacy/model (removed from Megatron-LM in
// 2026, the default until mid-2024): its state dict nests
// language_model.{embedding,encoder,output_layer} and word_embeddings_for_head, and its
// layers use other names for the same tensors. From checkpoint_version 2.0 on, its
// query_key_value rows are laid out as Megatron-core's linear_qkv (per query group: its
// query heads, its key head, its value head), and its dense_h_to_4h of SwiGLU as
// linear_fc1 (per rank: gate rows, then up rows), so once renamed its tensors merge as
// Megatron-core's do.

// legacyLayerNames maps the legacy layer's sub-module names to Megatron-core's (both
// spellings of the norms: Megatron renamed layernorm to norm in 2023 and reads both).
var legacyLayerNames = []struct{ legacy, core string }{
	{"input_norm.", "input_layernorm."},
	{"input_layernorm.", "input_layernorm."},
	{"self_attention.query_key_value.", "self_attention.linear_qkv."},
	{"attention.query_key_value.", "self_attention.linear_qkv."},
	{"self_attention.dense.", "self_attention.linear_proj."},
	{"attention.dense.", "self_attention.linear_proj."},
	{"post_attention_norm.", "pre_mlp_layernorm."},
	{"post_attention_layernorm.", "pre_mlp_layernorm."},
	{"mlp.dense_h_to_4h.", "mlp.linear_fc1."},
	{"mlp.dense_4h_to_h.", "mlp.linear_fc2."},
}

// legacyName returns the Megatron-core name of a legacy state dict's flattened name, ""
// for a tensor that holds nothing of the model (a rotary embedding's frequencies), or an
// error naming an unknown tensor.
func legacyName(name string) (string, error) {
	switch name {
	case "language_model.embedding.word_embeddings.weight":
		return "embedding.word_embeddings.weight", nil
	case "language_model.embedding.position_embeddings.weight":
		return "embedding.position_embeddings.weight", nil
	case "language_model.output_layer.weight", "word_embeddings_for_head.weight":
		return "output_layer.weight", nil
	case "language_model.rotary_pos_emb.inv_freq":
		return "", nil
	}
	for _, enc := range []string{"language_model.encoder.", "language_model.transformer."} {
		rest, ok := strings.CutPrefix(name, enc)
		if !ok {
			continue
		}
		for _, norm := range []string{"final_norm.", "final_layernorm."} {
			if tail, ok := strings.CutPrefix(rest, norm); ok {
				return "decoder.final_layernorm." + tail, nil
			}
		}
		if rest, ok := strings.CutPrefix(rest, "layers."); ok {
			i, sub, _ := strings.Cut(rest, ".")
			for _, r := range legacyLayerNames {
				if tail, ok := strings.CutPrefix(sub, r.legacy); ok {
					return "decoder.layers." + i + "." + r.core + tail, nil
				}
			}
		}
	}
	return "", fmt.Errorf("legacy Megatron tensor %s has no megago equivalent", name)
}
