package nn

import (
	"fmt"

	"megago/tensor"
)

// hfKind says how one megago tensor corresponds to Hugging Face tensors.
type hfKind uint8

const (
	hfCopy      hfKind = iota // same layout
	hfTranspose               // Conv1D [in, out] ↔ megago [out, in]
	hfVocab                   // megago pads rows to Vp; padding rows are zero
	hfConv1DQKV               // GPT-2 c_attn [C, 3C] (q|k|v columns) ↔ fused per head group
	hfSplitQKV                // Llama q_proj, k_proj, v_proj ↔ fused per query group
)

// hfRule maps one megago parameter to its Hugging Face tensor(s).
type hfRule struct {
	name string
	hf   []string
	kind hfKind
}

// hfRules returns the mapping of the GPT's parameters (whole model) to GPT-2's or Llama's
// names, by the model's position encoding. A Llama-style GPT with QKVBias (Qwen2) has
// q_proj, k_proj and v_proj biases; a tied one has no lm_head.weight.
func (m *GPT) hfRules() []hfRule {
	c := m.Config
	var rs []hfRule
	add := func(name string, kind hfKind, hf ...string) { rs = append(rs, hfRule{name, hf, kind}) }
	if c.Position == RoPE { // Llama
		add("embedding.word.weight", hfVocab, "model.embed_tokens.weight")
		for i := 0; i < c.NumLayers; i++ {
			l, h := fmt.Sprintf("layers.%d.", i), fmt.Sprintf("model.layers.%d.", i)
			add(l+"norm1.weight", hfCopy, h+"input_layernorm.weight")
			add(l+"attn.qkv.weight", hfSplitQKV, h+"self_attn.q_proj.weight", h+"self_attn.k_proj.weight", h+"self_attn.v_proj.weight")
			if c.QKVBias {
				add(l+"attn.qkv.bias", hfSplitQKV, h+"self_attn.q_proj.bias", h+"self_attn.k_proj.bias", h+"self_attn.v_proj.bias")
			}
			add(l+"attn.proj.weight", hfCopy, h+"self_attn.o_proj.weight")
			add(l+"norm2.weight", hfCopy, h+"post_attention_layernorm.weight")
			add(l+"mlp.gate.weight", hfCopy, h+"mlp.gate_proj.weight")
			add(l+"mlp.fc1.weight", hfCopy, h+"mlp.up_proj.weight")
			add(l+"mlp.fc2.weight", hfCopy, h+"mlp.down_proj.weight")
		}
		add("final_norm.weight", hfCopy, "model.norm.weight")
		if c.Untied {
			add("output.weight", hfVocab, "lm_head.weight")
		}
		return rs
	}
	add("embedding.word.weight", hfVocab, "transformer.wte.weight")
	add("embedding.position.weight", hfCopy, "transformer.wpe.weight")
	for i := 0; i < c.NumLayers; i++ {
		l, h := fmt.Sprintf("layers.%d.", i), fmt.Sprintf("transformer.h.%d.", i)
		add(l+"norm1.weight", hfCopy, h+"ln_1.weight")
		add(l+"norm1.bias", hfCopy, h+"ln_1.bias")
		add(l+"attn.qkv.weight", hfConv1DQKV, h+"attn.c_attn.weight")
		add(l+"attn.qkv.bias", hfConv1DQKV, h+"attn.c_attn.bias")
		add(l+"attn.proj.weight", hfTranspose, h+"attn.c_proj.weight")
		add(l+"attn.proj.bias", hfCopy, h+"attn.c_proj.bias")
		add(l+"norm2.weight", hfCopy, h+"ln_2.weight")
		add(l+"norm2.bias", hfCopy, h+"ln_2.bias")
		add(l+"mlp.fc1.weight", hfTranspose, h+"mlp.c_fc.weight")
		add(l+"mlp.fc1.bias", hfCopy, h+"mlp.c_fc.bias")
		add(l+"mlp.fc2.weight", hfTranspose, h+"mlp.c_proj.weight")
		add(l+"mlp.fc2.bias", hfCopy, h+"mlp.c_proj.bias")
	}
	add("final_norm.weight", hfCopy, "transformer.ln_f.weight")
	add("final_norm.bias", hfCopy, "transformer.ln_f.bias")
	if c.Untied {
		add("output.weight", hfVocab, "lm_head.weight")
	}
	return rs
}

// HFConfig returns GPT-2's or Llama's config.json fields.
func (m *GPT) HFConfig() map[string]any {
	c := m.Config
	if c.Position == RoPE {
		return map[string]any{"model_type": "llama", "architectures": []string{"LlamaForCausalLM"},
			"vocab_size": c.Vocab, "hidden_size": c.Hidden, "intermediate_size": c.FFNHidden,
			"num_hidden_layers": c.NumLayers, "num_attention_heads": c.Heads, "num_key_value_heads": c.KVHeads,
			"rms_norm_eps": c.NormEps, "rope_theta": c.RoPETheta, "tie_word_embeddings": !c.Untied,
			"max_position_embeddings": c.MaxPosition, "hidden_act": "silu"}
	}
	return map[string]any{"model_type": "gpt2", "architectures": []string{"GPT2LMHeadModel"},
		"vocab_size": c.Vocab, "n_embd": c.Hidden, "n_inner": c.FFNHidden, "n_layer": c.NumLayers,
		"n_head": c.Heads, "n_positions": c.MaxPosition, "layer_norm_epsilon": c.NormEps,
		"activation_function": "gelu_new", "tie_word_embeddings": !c.Untied}
}

// ToHF converts global megago parameters to GPT-2's or Llama's tensors.
func (m *GPT) ToHF(global map[string]*tensor.Tensor) (map[string]*tensor.Tensor, error) {
	return convertHF(m.hfRules(), global, true, m.qkvLayout())
}

// FromHF converts GPT-2's or Llama's tensors to global megago parameters.
func (m *GPT) FromHF(hf map[string]*tensor.Tensor) (map[string]*tensor.Tensor, error) {
	return convertHF(m.hfRules(), hf, false, m.qkvLayout())
}

// qkvLayout describes the fused projection: G groups of per query heads of size hs, the
// vocabulary and its padding.
type qkvLayout struct{ groups, per, hs, vocab, vp int }

func (m *GPT) qkvLayout() qkvLayout {
	c := m.Config
	return qkvLayout{groups: c.KVHeads, per: c.Heads / c.KVHeads, hs: c.HeadSize, vocab: c.Vocab, vp: m.Vp}
}

// convertHF applies rules in one direction: toHF reads megago names from src and writes
// Hugging Face names, else the reverse.
func convertHF(rules []hfRule, src map[string]*tensor.Tensor, toHF bool, l qkvLayout) (map[string]*tensor.Tensor, error) {
	out := map[string]*tensor.Tensor{}
	get := func(name string) (*tensor.Tensor, error) {
		t, ok := src[name]
		if !ok {
			return nil, fmt.Errorf("nn: Hugging Face conversion: no tensor %q", name)
		}
		return t.Detach(), nil
	}
	for _, r := range rules {
		if toHF {
			t, err := get(r.name)
			if err != nil {
				return nil, err
			}
			hf, err := r.toHF(t, l)
			if err != nil {
				return nil, err
			}
			for i, h := range r.hf {
				out[h] = hf[i]
			}
			continue
		}
		var ins []*tensor.Tensor
		for _, h := range r.hf {
			t, err := get(h)
			if err != nil {
				return nil, err
			}
			ins = append(ins, t)
		}
		t, err := r.fromHF(ins, l)
		if err != nil {
			return nil, err
		}
		out[r.name] = t
	}
	return out, nil
}

func (r hfRule) toHF(t *tensor.Tensor, l qkvLayout) ([]*tensor.Tensor, error) {
	switch r.kind {
	case hfTranspose:
		return []*tensor.Tensor{t.Transpose(0, 1)}, nil
	case hfVocab:
		return []*tensor.Tensor{t.Narrow(0, 0, l.vocab)}, nil
	case hfConv1DQKV, hfSplitQKV:
		q, k, v := unfuseQKV(t, l) // each [rows, ...]
		if r.kind == hfSplitQKV {
			return []*tensor.Tensor{q, k, v}, nil
		}
		qkv := tensor.Concat(0, q, k, v) // [3C] or [3C, C]
		if qkv.Rank() == 2 {
			qkv = qkv.Transpose(0, 1) // Conv1D [C, 3C]
		}
		return []*tensor.Tensor{qkv}, nil
	}
	return []*tensor.Tensor{t}, nil
}

func (r hfRule) fromHF(ins []*tensor.Tensor, l qkvLayout) (*tensor.Tensor, error) {
	t := ins[0]
	switch r.kind {
	case hfTranspose:
		return t.Transpose(0, 1), nil
	case hfVocab:
		if t.Dim(0) != l.vocab {
			return nil, fmt.Errorf("nn: Hugging Face conversion: %s has %d rows, want vocabulary %d", r.hf[0], t.Dim(0), l.vocab)
		}
		pad := tensor.Zeros(t.Device(), t.DType(), l.vp-l.vocab, t.Dim(1))
		return tensor.Concat(0, t, pad), nil
	case hfConv1DQKV:
		if t.Rank() == 2 {
			t = t.Transpose(0, 1) // [3C, C]
		}
		n := l.groups * l.per * l.hs
		if t.Dim(0) != 3*n {
			return nil, fmt.Errorf("nn: Hugging Face conversion: %s has %v, want %d fused rows", r.hf[0], t.Shape(), 3*n)
		}
		parts := tensor.Split(t, 0, n, n, n)
		return fuseQKV(parts[0], parts[1], parts[2], l), nil
	case hfSplitQKV:
		return fuseQKV(ins[0], ins[1], ins[2], l), nil
	}
	return t, nil
}

// fuseQKV lays q [G·per·HS, ...], k and v [G·HS, ...] out per group: q heads, k, v.
func fuseQKV(q, k, v *tensor.Tensor, l qkvLayout) *tensor.Tensor {
	rest := q.Shape()[1:]
	grouped := func(t *tensor.Tensor, rows int) *tensor.Tensor {
		return t.Reshape(append([]int{l.groups, rows}, rest...)...)
	}
	f := tensor.Concat(1, grouped(q, l.per*l.hs), grouped(k, l.hs), grouped(v, l.hs))
	return f.Reshape(append([]int{l.groups * (l.per + 2) * l.hs}, rest...)...)
}

// unfuseQKV is fuseQKV's inverse.
func unfuseQKV(t *tensor.Tensor, l qkvLayout) (q, k, v *tensor.Tensor) {
	rest := t.Shape()[1:]
	g := t.Reshape(append([]int{l.groups, (l.per + 2) * l.hs}, rest...)...)
	parts := tensor.Split(g, 1, l.per*l.hs, l.hs, l.hs)
	flat := func(p *tensor.Tensor) *tensor.Tensor { return p.Reshape(append([]int{-1}, rest...)...) }
	return flat(parts[0]), flat(parts[1]), flat(parts[2])
}
