package checkpoint

import (
	"bytes"
	"fmt"
	"maps"
	"strings"

	"megago/tensor"
)

// Tensor names of real Hugging Face files that differ from what save_pretrained writes
// today for a causal LM.

// hfBases are, per model type, the base model's prefix (base_model_prefix + "."), the
// embedding a tied lm_head.weight copies, and the suffixes of buffers older versions of
// transformers saved with the weights.
var hfBases = map[string]struct {
	prefix, embedding string
	buffers           []string
}{
	"gpt2":    {"transformer.", "transformer.wte.weight", []string{".attn.bias", ".attn.masked_bias"}},
	"llama":   {"model.", "model.embed_tokens.weight", []string{".rotary_emb.inv_freq"}},
	"mistral": {"model.", "model.embed_tokens.weight", []string{".rotary_emb.inv_freq"}},
	"qwen2":   {"model.", "model.embed_tokens.weight", []string{".rotary_emb.inv_freq"}},
}

// canonicalHFNames returns the tensors hf of a model of type kind (config.json's
// model_type) and Model m under the names its converter reads: a base model's tensors
// saved without its prefix (GPT-2's h.0.… for transformer.h.0.…, as in the original
// gpt2 files) get it; buffers (GPT-2's causal mask attn.bias, Llama's
// rotary_emb.inv_freq) are dropped; a tied model's lm_head.weight, which
// pytorch_model.bin files may hold beside the embedding, is dropped if it equals the
// embedding and refused otherwise.
func canonicalHFNames(m Model, kind string, hf map[string]*tensor.Tensor) (map[string]*tensor.Tensor, error) {
	base, ok := hfBases[kind]
	if !ok || m.Arch != ArchGPT {
		return hf, nil
	}
	c, err := m.GPTConfig()
	if err != nil {
		return nil, err
	}
	out := maps.Clone(hf)
	prefixed := false
	for name := range hf {
		prefixed = prefixed || strings.HasPrefix(name, base.prefix)
	}
	for name, t := range hf {
		if !prefixed && !strings.HasPrefix(name, "lm_head.") {
			delete(out, name)
			name = base.prefix + name
			if _, dup := hf[name]; dup {
				return nil, fmt.Errorf("tensor %q is present with and without the prefix %q", name, base.prefix)
			}
			out[name] = t
		}
		for _, b := range base.buffers {
			if strings.HasSuffix(name, b) {
				delete(out, name)
			}
		}
	}
	head, ok := out["lm_head.weight"]
	if c.Untied || !ok {
		return out, nil
	}
	emb, ok := out[base.embedding]
	if !ok || !head.Shape().Equal(emb.Shape()) || head.DType() != emb.DType() || !bytes.Equal(tensorBytes(head), tensorBytes(emb)) {
		return nil, fmt.Errorf("lm_head.weight differs from %s, but tie_word_embeddings is true", base.embedding)
	}
	delete(out, "lm_head.weight")
	return out, nil
}
