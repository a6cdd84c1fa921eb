package checkpoint

import (
	"fmt"
	"maps"
	"strings"

	"megago/nn"
)

// Writing the config.json of a Llama-style GPT with experts as Mixtral's, Qwen2-MoE's or
// Qwen3-MoE's.

// moeHFType returns the model type a Llama-style GPT with experts exports as: qwen2_moe
// with a QKV bias (and a gated shared expert in every MoE layer), qwen3_moe with
// query/key norms (and no shared expert), else mixtral (every layer MoE, no shared
// expert, the top k probabilities renormalized). Routers Hugging Face's classes do not
// have (sigmoid scores, expert biases) are refused. Training-only settings (the
// load-balancing type, z-loss, capacity and token dropping, the dispatcher, grouped
// GEMMs, EP) are not part of the architecture and are not written.
func moeHFType(c nn.GPTConfig) (string, error) {
	m := c.MoE
	kind := "mixtral"
	switch {
	case c.QKVBias:
		kind = "qwen2_moe"
	case c.QKNorm:
		kind = "qwen3_moe"
	}
	allMoE := true
	for i := range c.NumLayers {
		allMoE = allMoE && c.MoE.IsMoELayer(i, c.NumLayers)
	}
	var extra []string
	for _, v := range []struct {
		on   bool
		what string
	}{
		{m.ScoreFunction != "" && m.ScoreFunction != "softmax", fmt.Sprintf("a %s router", m.ScoreFunction)},
		{m.EnableExpertBias, "expert biases (aux-loss-free balancing)"},
		{kind == "mixtral" && c.RoPEScaling != 0, "Llama 3.1 rope scaling (MixtralConfig has no rope_scaling)"},
		{kind == "mixtral" && m.PreSoftmax, "the softmax over all experts before the top k (Mixtral renormalizes the top k)"},
		{kind == "mixtral" && !allMoE, "dense layers (Mixtral's are all MoE)"},
		{kind != "qwen2_moe" && m.SharedExpertFFNHidden != 0, "a shared expert (only Qwen2-MoE has one)"},
		{kind == "qwen2_moe" && (m.SharedExpertFFNHidden == 0 || !m.SharedExpertGate), "no gated shared expert (Qwen2-MoE has one in every MoE layer)"},
	} {
		if v.on {
			extra = append(extra, v.what)
		}
	}
	if len(extra) > 0 {
		return "", fmt.Errorf("checkpoint: Hugging Face export of a GPT with experts as %s with %s is not implemented", kind, strings.Join(extra, ", "))
	}
	return kind, nil
}

// moeHFConfig sets the keys of MixtralConfig, Qwen2MoeConfig or Qwen3MoeConfig (kind,
// from moeHFType) for c.
func moeHFConfig(kind string, c nn.GPTConfig, cfg map[string]any) {
	m := c.MoE
	topK, ffn, aux := m.TopK, m.FFNHidden, m.AuxLossCoeff
	if topK == 0 {
		topK = 2 // MoEConfig's default
	}
	if ffn == 0 {
		ffn = c.FFNHidden
	}
	if m.LoadBalancing == "none" {
		aux = 0
	}
	llamaHFConfig(c, cfg)
	switch kind {
	case "mixtral":
		for _, k := range []string{"pretraining_tp", "attention_bias", "mlp_bias", "rope_scaling"} {
			delete(cfg, k)
		}
		maps.Copy(cfg, map[string]any{"model_type": "mixtral", "architectures": []string{"MixtralForCausalLM"},
			"intermediate_size": ffn, "num_local_experts": m.NumExperts, "router_jitter_noise": 0.0, "sliding_window": nil})
	case "qwen2_moe":
		qwen2HFConfig(c, cfg)
		delete(cfg, "layer_types")
		maps.Copy(cfg, map[string]any{"model_type": "qwen2_moe", "architectures": []string{"Qwen2MoeForCausalLM"},
			"shared_expert_intermediate_size": m.SharedExpertFFNHidden})
	case "qwen3_moe":
		qwen3HFConfig(c, cfg)
		maps.Copy(cfg, map[string]any{"model_type": "qwen3_moe", "architectures": []string{"Qwen3MoeForCausalLM"}})
	}
	if kind != "mixtral" {
		step, dense := qwenSparseLayers(c.TransformerConfig)
		maps.Copy(cfg, map[string]any{"num_experts": m.NumExperts, "moe_intermediate_size": ffn,
			"norm_topk_prob": !m.PreSoftmax, "decoder_sparse_step": step, "mlp_only_layers": dense})
	}
	maps.Copy(cfg, map[string]any{"num_experts_per_tok": topK, "output_router_logits": false, "router_aux_loss_coef": aux})
}

// qwenSparseLayers returns the decoder_sparse_step and mlp_only_layers that give c's MoE
// layers under Qwen2MoeDecoderLayer's rule (see sparseLayers): the smallest step that
// needs no mlp_only_layers, else step 1 and the dense layers.
func qwenSparseLayers(c nn.TransformerConfig) (step int, dense []int) {
	dense = []int{} // written as [], not null
	for step = 1; step <= c.NumLayers; step++ {
		ok := true
		for i := range c.NumLayers {
			ok = ok && c.MoE.IsMoELayer(i, c.NumLayers) == ((i+1)%step == 0)
		}
		if ok {
			return step, dense
		}
	}
	for i := range c.NumLayers {
		if !c.MoE.IsMoELayer(i, c.NumLayers) {
			dense = append(dense, i)
		}
	}
	return 1, dense
}
