package nn

import (
	"fmt"
	"maps"
	"slices"

	"megago/tensor"
)

// bertHFBias is the Hugging Face name of the MLM output bias, [V] there and [Vp] in megago.
const bertHFBias = "cls.predictions.bias"

// hfRules returns BERT's mapping to Hugging Face's BertForPreTraining (BertForMaskedLM
// without the binary head) for convertHF, except the output bias (see ToHF), and the
// shape of every Hugging Face tensor; an error if the configuration has no Hugging Face
// equivalent.
func (m *BERT) hfRules() ([]hfRule, map[string]tensor.Shape, error) {
	c := m.Config.TransformerConfig
	switch {
	case !c.PostLN:
		return nil, nil, fmt.Errorf("nn: BERT: the pre-LN variant (PostLN false) has no Hugging Face equivalent")
	case c.Norm != LayerNormKind || !c.Bias:
		return nil, nil, fmt.Errorf("nn: BERT: Hugging Face BERT has LayerNorm and biases")
	case c.KVHeads != c.Heads || c.Heads*c.HeadSize != c.Hidden:
		return nil, nil, fmt.Errorf("nn: BERT: Hugging Face BERT has Heads heads of Hidden/Heads, not %d key/value heads of %d", c.KVHeads, c.HeadSize)
	}
	C, F := c.Hidden, c.FFNHidden
	var rs []hfRule
	shapes := map[string]tensor.Shape{}
	add := func(name string, kind hfKind, shape tensor.Shape, hf ...string) {
		rs = append(rs, hfRule{name, hf, kind})
		for _, h := range hf {
			shapes[h] = shape
		}
	}
	linear := func(name, hf string, out, in int) {
		add(name+".weight", hfCopy, tensor.Shape{out, in}, hf+".weight")
		add(name+".bias", hfCopy, tensor.Shape{out}, hf+".bias")
	}
	norm := func(name, hf string) {
		add(name+".weight", hfCopy, tensor.Shape{C}, hf+".weight")
		add(name+".bias", hfCopy, tensor.Shape{C}, hf+".bias")
	}
	e := "bert.embeddings."
	add("embedding.word.weight", hfVocab, tensor.Shape{c.Vocab, C}, e+"word_embeddings.weight")
	add("embedding.position.weight", hfCopy, tensor.Shape{c.MaxPosition, C}, e+"position_embeddings.weight")
	add("embedding.token_type.weight", hfCopy, tensor.Shape{m.Config.TypeVocab, C}, e+"token_type_embeddings.weight")
	norm("embedding.norm", e+"LayerNorm")
	for i := 0; i < c.NumLayers; i++ {
		l, h := fmt.Sprintf("layers.%d.", i), fmt.Sprintf("bert.encoder.layer.%d.", i)
		s := h + "attention.self."
		add(l+"attn.qkv.weight", hfSplitQKV, tensor.Shape{C, C}, s+"query.weight", s+"key.weight", s+"value.weight")
		add(l+"attn.qkv.bias", hfSplitQKV, tensor.Shape{C}, s+"query.bias", s+"key.bias", s+"value.bias")
		linear(l+"attn.proj", h+"attention.output.dense", C, C)
		norm(l+"norm1", h+"attention.output.LayerNorm")
		linear(l+"mlp.fc1", h+"intermediate.dense", F, C)
		linear(l+"mlp.fc2", h+"output.dense", C, F)
		norm(l+"norm2", h+"output.LayerNorm")
	}
	if !m.Config.NoBinaryHead {
		linear("pooler", "bert.pooler.dense", C, C)
	}
	linear("lm_head.dense", "cls.predictions.transform.dense", C, C)
	norm("lm_head.norm", "cls.predictions.transform.LayerNorm")
	shapes[bertHFBias] = tensor.Shape{c.Vocab}
	if !m.Config.NoBinaryHead {
		linear("binary_head", "cls.seq_relationship", 2, C)
	}
	return rs, shapes, nil
}

// hfLayout returns the sizes convertHF needs.
func (m *BERT) hfLayout() qkvLayout {
	c := m.Config
	return qkvLayout{groups: c.KVHeads, per: c.Heads / c.KVHeads, hs: c.HeadSize, vocab: c.Vocab, vp: m.Vp}
}

// ToHF returns the Hugging Face BertForPreTraining tensors (bert.embeddings.…,
// bert.encoder.layer.<i>.attention.self.query.weight, …, bert.pooler.dense.…,
// cls.predictions.transform.…, cls.predictions.bias, cls.seq_relationship.…) of the
// global parameters of the whole model, without vocabulary padding. The tied copies that
// a Hugging Face state dict also holds (cls.predictions.decoder.weight and .bias) are left
// out, as save_pretrained does. It fails for the pre-LN variant.
func (m *BERT) ToHF(global map[string]*tensor.Tensor) (map[string]*tensor.Tensor, error) {
	rules, _, err := m.hfRules()
	if err != nil {
		return nil, err
	}
	bias, ok := global["lm_head.bias"]
	if !ok {
		return nil, fmt.Errorf("nn: Hugging Face conversion: no tensor %q", "lm_head.bias")
	}
	out, err := convertHF(rules, global, true, m.hfLayout())
	if err != nil {
		return nil, err
	}
	out[bertHFBias] = bias.Detach().Narrow(0, 0, m.Config.Vocab)
	return out, nil
}

// FromHF returns the global parameters of the whole model from Hugging Face BERT tensors,
// with zero vocabulary padding. Tensors it does not use (the tied copies, buffers) are
// ignored; a missing or mis-shaped tensor is an error naming it.
func (m *BERT) FromHF(hf map[string]*tensor.Tensor) (map[string]*tensor.Tensor, error) {
	rules, shapes, err := m.hfRules()
	if err != nil {
		return nil, err
	}
	if err := checkHFShapes(hf, shapes); err != nil {
		return nil, err
	}
	out, err := convertHF(rules, hf, false, m.hfLayout())
	if err != nil {
		return nil, err
	}
	out["lm_head.bias"] = padRows(hf[bertHFBias].Detach(), m.Vp)
	return out, nil
}

// checkHFShapes returns an error naming the first (by name) tensor of shapes that hf lacks
// or holds with another shape.
func checkHFShapes(hf map[string]*tensor.Tensor, shapes map[string]tensor.Shape) error {
	for _, name := range slices.Sorted(maps.Keys(shapes)) {
		t, ok := hf[name]
		if !ok {
			return fmt.Errorf("nn: Hugging Face conversion: no tensor %q", name)
		}
		if !t.Shape().Equal(shapes[name]) {
			return fmt.Errorf("nn: Hugging Face conversion: %s has shape %v, want %v", name, t.Shape(), shapes[name])
		}
	}
	return nil
}

// padRows returns t [n, ...] with zero rows appended up to rows.
func padRows(t *tensor.Tensor, rows int) *tensor.Tensor {
	if t.Dim(0) == rows {
		return t
	}
	zeros := tensor.Zeros(t.Device(), t.DType(), append(tensor.Shape{rows - t.Dim(0)}, t.Shape()[1:]...)...)
	return tensor.Concat(0, t, zeros)
}

// HFConfig returns the fields of Hugging Face's BertConfig for the model.
func (m *BERT) HFConfig() map[string]any {
	c := m.Config.TransformerConfig
	arch := "BertForPreTraining"
	if m.Config.NoBinaryHead {
		arch = "BertForMaskedLM"
	}
	act := map[Activation]string{GeLU: "gelu_new", GeLUErf: "gelu", ReLU: "relu"}[c.Activation]
	return map[string]any{
		"architectures":                []string{arch},
		"model_type":                   "bert",
		"vocab_size":                   c.Vocab,
		"hidden_size":                  c.Hidden,
		"num_hidden_layers":            c.NumLayers,
		"num_attention_heads":          c.Heads,
		"intermediate_size":            c.FFNHidden,
		"hidden_act":                   act,
		"hidden_dropout_prob":          c.Dropout,
		"attention_probs_dropout_prob": c.AttnDropout,
		"max_position_embeddings":      c.MaxPosition,
		"type_vocab_size":              m.Config.TypeVocab,
		"layer_norm_eps":               c.NormEps,
		"initializer_range":            c.InitStd,
		"position_embedding_type":      "absolute",
		"tie_word_embeddings":          true,
		"pad_token_id":                 0,
	}
}
