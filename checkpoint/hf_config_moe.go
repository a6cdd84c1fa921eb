package checkpoint

import (
	"fmt"
	"strings"

	"megago/nn"
)

// Reading the mixture-of-experts settings of a Mixtral, Qwen2-MoE or Qwen3-MoE
// config.json into nn.MoEConfig.
//
// The routers of all three take the softmax over all experts in float32 and keep the
// top num_experts_per_tok; Mixtral renormalizes the kept probabilities to sum to 1, the
// Qwen models do when norm_topk_prob is true. Renormalized top-k probabilities are the
// softmax over the top k logits, Megatron's default router; without renormalization they
// are the softmax over all experts, Megatron's --moe-router-pre-softmax. So
// norm_topk_prob false (and only it) gives MoEConfig.PreSoftmax.

// moe reads MixtralConfig, Qwen2MoeConfig or Qwen3MoeConfig (model type kind): the
// Llama-style attention as llama reads it and the experts into MoEConfig.
// output_router_logits, which only says whether transformers' forward returns the router
// logits (and adds the auxiliary loss), is not read.
func (f *hfFields) moe(kind string) nn.GPTConfig {
	c := f.llama(kind)
	m := nn.MoEConfig{AuxLossCoeff: f.num("router_aux_loss_coef", 0.001)}
	if kind == "mixtral" {
		m.NumExperts, m.TopK = f.int("num_local_experts", required), f.int("num_experts_per_tok", required)
		m.FFNHidden = c.FFNHidden // Mixtral's experts are of intermediate_size; it has no dense MLP
		if v := f.num("router_jitter_noise", 0); v != 0 {
			f.refuse("router_jitter_noise", v, "the router's input jitter is not implemented")
		}
		if c.RoPEScaling != 0 {
			f.refuse("rope_scaling", f.m["rope_scaling"], "MixtralConfig has no rope scaling")
		}
	} else {
		m.NumExperts, m.TopK = f.int("num_experts", required), f.int("num_experts_per_tok", required)
		if m.FFNHidden = f.int("moe_intermediate_size", required); m.FFNHidden < 1 {
			f.refuse("moe_intermediate_size", m.FFNHidden, "want ≥ 1")
		}
		m.PreSoftmax = !f.bool("norm_topk_prob", false)
		m.LayerPattern = f.sparseLayers(c.NumLayers)
	}
	if kind == "qwen2_moe" {
		// Every Qwen2-MoE block has a shared expert whose output is scaled by
		// sigmoid(x·shared_expert_gate).
		m.SharedExpertFFNHidden, m.SharedExpertGate = f.int("shared_expert_intermediate_size", required), true
		if m.SharedExpertFFNHidden < 1 {
			f.refuse("shared_expert_intermediate_size", m.SharedExpertFFNHidden, "want ≥ 1")
		}
		if v := f.bool("qkv_bias", true); !v {
			f.refuse("qkv_bias", v, "megago's Qwen2-MoE has q, k and v biases")
		}
	}
	switch {
	case m.NumExperts < 0:
		f.refuse(map[bool]string{true: "num_local_experts", false: "num_experts"}[kind == "mixtral"], m.NumExperts, "want ≥ 0")
	case m.NumExperts == 0:
		return c // Qwen-MoE with no experts: every layer dense, as transformers builds it
	case m.TopK < 1 || m.TopK > m.NumExperts:
		f.refuse("num_experts_per_tok", m.TopK, fmt.Sprintf("want 1 to the %d experts", m.NumExperts))
	}
	c.MoE = m
	return c
}

// maxPatternLayers bounds the layers of a Qwen-MoE with dense layers among its MoE
// layers, whose LayerPattern has an entry per layer: num_hidden_layers is read before
// the sizes are checked against the weights (checkSize).
const maxPatternLayers = 1 << 20

// sparseLayers returns the MoEConfig.LayerPattern of a Qwen-MoE's num_hidden_layers
// layers: layer i has experts unless mlp_only_layers lists it, when (i+1) is a multiple
// of decoder_sparse_step (Qwen2MoeDecoderLayer's rule); "" when every layer has them.
func (f *hfFields) sparseLayers(layers int) string {
	step := f.int("decoder_sparse_step", 1)
	if step < 1 {
		f.refuse("decoder_sparse_step", step, "want ≥ 1")
		return ""
	}
	dense := map[int]bool{}
	if raw, ok := f.m["mlp_only_layers"]; ok && raw != nil {
		list, ok := raw.([]any)
		if !ok {
			f.refuse("mlp_only_layers", raw, "not a list")
		}
		for j, v := range list {
			i, ok := v.(float64)
			if !ok || i != float64(int(i)) || i < 0 || int(i) >= layers {
				f.refuse(fmt.Sprintf("mlp_only_layers[%d]", j), v, fmt.Sprintf("not a layer of the %d", layers))
				continue
			}
			dense[int(i)] = true
		}
	}
	if step == 1 && len(dense) == 0 {
		return ""
	}
	if layers > maxPatternLayers {
		f.refuse("num_hidden_layers", layers, fmt.Sprintf("more than %d layers with dense layers among the MoE layers", maxPatternLayers))
		return ""
	}
	var b strings.Builder
	for i := range layers {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte(map[bool]byte{true: '1', false: '0'}[!dense[i] && (i+1)%step == 0])
	}
	return b.String()
}
