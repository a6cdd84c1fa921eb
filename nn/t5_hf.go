package nn

import (
	"fmt"

	"megago/tensor"
)

// hfRules returns T5's mapping to Hugging Face's T5ForConditionalGeneration for
// convertHF, except the decoder's fused cross-attention k/v projections (see t5CrossKV),
// and the shape of every Hugging Face tensor.
func (m *T5) hfRules() ([]hfRule, map[string]tensor.Shape) {
	c := m.Config.TransformerConfig
	C, F, inner := c.Hidden, c.FFNHidden, c.Heads*c.HeadSize
	var rs []hfRule
	shapes := map[string]tensor.Shape{}
	add := func(name string, kind hfKind, shape tensor.Shape, hf ...string) {
		rs = append(rs, hfRule{name, hf, kind})
		for _, h := range hf {
			shapes[h] = shape
		}
	}
	add("embedding.word.weight", hfVocab, tensor.Shape{c.Vocab, C}, "shared.weight")
	for _, s := range []struct {
		stack  string
		layers int
	}{{"encoder", c.NumLayers}, {"decoder", m.Config.DecoderLayers}} {
		bias := s.stack + ".block.0.layer.0.SelfAttention.relative_attention_bias.weight"
		add(s.stack+".relative_bias.weight", hfCopy, tensor.Shape{c.RelativeBuckets, c.Heads}, bias)
		for i := 0; i < s.layers; i++ {
			l, h := fmt.Sprintf("%s.layers.%d.", s.stack, i), fmt.Sprintf("%s.block.%d.layer.", s.stack, i)
			sa := h + "0.SelfAttention."
			add(l+"norm1.weight", hfCopy, tensor.Shape{C}, h+"0.layer_norm.weight")
			add(l+"attn.qkv.weight", hfSplitQKV, tensor.Shape{inner, C}, sa+"q.weight", sa+"k.weight", sa+"v.weight")
			add(l+"attn.proj.weight", hfCopy, tensor.Shape{C, inner}, sa+"o.weight")
			ff := h + "1."
			if s.stack == "decoder" {
				ca := h + "1.EncDecAttention."
				add(l+"norm_cross.weight", hfCopy, tensor.Shape{C}, h+"1.layer_norm.weight")
				add(l+"cross.q.weight", hfCopy, tensor.Shape{inner, C}, ca+"q.weight")
				shapes[ca+"k.weight"], shapes[ca+"v.weight"] = tensor.Shape{inner, C}, tensor.Shape{inner, C}
				add(l+"cross.proj.weight", hfCopy, tensor.Shape{C, inner}, ca+"o.weight")
				ff = h + "2."
			}
			add(l+"norm2.weight", hfCopy, tensor.Shape{C}, ff+"layer_norm.weight")
			add(l+"mlp.fc1.weight", hfCopy, tensor.Shape{F, C}, ff+"DenseReluDense.wi.weight")
			add(l+"mlp.fc2.weight", hfCopy, tensor.Shape{C, F}, ff+"DenseReluDense.wo.weight")
		}
		add(s.stack+".final_norm.weight", hfCopy, tensor.Shape{C}, s.stack+".final_layer_norm.weight")
	}
	return rs, shapes
}

// t5CrossKV returns, for each decoder layer, the megago name of its fused cross-attention
// k/v weight and the Hugging Face names of its k and v weights.
func (m *T5) t5CrossKV() (mg, k, v []string) {
	for i := 0; i < m.Config.DecoderLayers; i++ {
		ca := fmt.Sprintf("decoder.block.%d.layer.1.EncDecAttention.", i)
		mg = append(mg, fmt.Sprintf("decoder.layers.%d.cross.kv.weight", i))
		k, v = append(k, ca+"k.weight"), append(v, ca+"v.weight")
	}
	return mg, k, v
}

func (m *T5) hfLayout() qkvLayout {
	c := m.Config
	return qkvLayout{groups: c.KVHeads, per: c.Heads / c.KVHeads, hs: c.HeadSize, vocab: c.Vocab, vp: m.Vp}
}

// ToHF returns the Hugging Face T5ForConditionalGeneration tensors (shared.weight,
// encoder.block.<i>.layer.0.SelfAttention.q.weight, …,
// encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight,
// decoder.block.<i>.layer.1.EncDecAttention.k.weight, …, decoder.final_layer_norm.weight)
// of the global parameters, without vocabulary padding. The tied copies of shared.weight
// that a Hugging Face state dict also holds (encoder.embed_tokens.weight,
// decoder.embed_tokens.weight, lm_head.weight) are left out, as save_pretrained does.
func (m *T5) ToHF(global map[string]*tensor.Tensor) (map[string]*tensor.Tensor, error) {
	rules, _ := m.hfRules()
	out, err := convertHF(rules, global, true, m.hfLayout())
	if err != nil {
		return nil, err
	}
	mg, k, v := m.t5CrossKV()
	hs := m.Config.HeadSize
	for i, name := range mg {
		t, ok := global[name]
		if !ok {
			return nil, fmt.Errorf("nn: Hugging Face conversion: no tensor %q", name)
		}
		// Per head group g, rows [k_g; v_g] of HS rows each.
		kv := t.Detach().Reshape(m.Config.KVHeads, 2*hs, m.Config.Hidden)
		parts := tensor.Split(kv, 1, hs, hs)
		out[k[i]] = parts[0].Reshape(-1, m.Config.Hidden)
		out[v[i]] = parts[1].Reshape(-1, m.Config.Hidden)
	}
	return out, nil
}

// FromHF returns the global parameters from Hugging Face T5 tensors, with zero vocabulary
// padding. Tensors it does not use (the tied copies) are ignored; a missing or mis-shaped
// tensor is an error naming it.
func (m *T5) FromHF(hf map[string]*tensor.Tensor) (map[string]*tensor.Tensor, error) {
	rules, shapes := m.hfRules()
	if err := checkHFShapes(hf, shapes); err != nil {
		return nil, err
	}
	out, err := convertHF(rules, hf, false, m.hfLayout())
	if err != nil {
		return nil, err
	}
	mg, k, v := m.t5CrossKV()
	g, hs, c := m.Config.KVHeads, m.Config.HeadSize, m.Config.Hidden
	for i, name := range mg {
		kt := hf[k[i]].Detach().Reshape(g, hs, c)
		vt := hf[v[i]].Detach().Reshape(g, hs, c)
		out[name] = tensor.Concat(1, kt, vt).Reshape(g*2*hs, c) // [G·2·HS, C]
	}
	return out, nil
}

// HFConfig returns the fields of Hugging Face's T5Config for the model.
func (m *T5) HFConfig() map[string]any {
	c := m.Config
	return map[string]any{
		"architectures":                   []string{"T5ForConditionalGeneration"},
		"model_type":                      "t5",
		"vocab_size":                      c.Vocab,
		"d_model":                         c.Hidden,
		"d_kv":                            c.HeadSize,
		"d_ff":                            c.FFNHidden,
		"num_layers":                      c.NumLayers,
		"num_decoder_layers":              c.DecoderLayers,
		"num_heads":                       c.Heads,
		"relative_attention_num_buckets":  c.RelativeBuckets,
		"relative_attention_max_distance": c.RelativeMaxDistance,
		"dropout_rate":                    c.Dropout,
		"layer_norm_epsilon":              c.NormEps,
		"initializer_factor":              1.0,
		"feed_forward_proj":               "relu",
		"is_encoder_decoder":              true,
		"tie_word_embeddings":             true,
		"pad_token_id":                    0,
		"eos_token_id":                    1,
		"decoder_start_token_id":          0,
	}
}
