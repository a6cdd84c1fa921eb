package checkpoint

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"megago/tensor"
)

// Files as older transformers saved them import as the current ones: GPT-2's tensors
// without the transformer. prefix, with its causal-mask buffers and a tied
// lm_head.weight equal to the embedding (the original gpt2 files); Llama's with
// rotary_emb.inv_freq buffers.
func TestImportHFOlderNames(t *testing.T) {
	for _, tc := range []struct {
		model string
		edit  func(hf map[string]*tensor.Tensor) map[string]*tensor.Tensor
	}{
		{"gpt2", func(hf map[string]*tensor.Tensor) map[string]*tensor.Tensor {
			out := map[string]*tensor.Tensor{"lm_head.weight": hf["transformer.wte.weight"]}
			for name, t := range hf {
				out[strings.TrimPrefix(name, "transformer.")] = t
			}
			out["h.0.attn.bias"] = tensor.Ones(tensor.NewCPU(), tensor.F32, 1, 1, 16, 16)
			out["h.1.attn.masked_bias"] = tensor.Ones(tensor.NewCPU(), tensor.F32)
			return out
		}},
		{"llama", func(hf map[string]*tensor.Tensor) map[string]*tensor.Tensor {
			hf["model.layers.1.self_attn.rotary_emb.inv_freq"] = tensor.Ones(tensor.NewCPU(), tensor.F32, 3)
			return hf
		}},
	} {
		t.Run(tc.model, func(t *testing.T) {
			src := filepath.Join("testdata", "hf", tc.model)
			_, want, err := ImportHF(src)
			must(t, err)
			dir := t.TempDir()
			copyDir(t, src, dir)
			hf, _, err := ReadSafetensors(filepath.Join(src, hfWeightsFile))
			must(t, err)
			must(t, WriteSafetensors(filepath.Join(dir, hfWeightsFile), tc.edit(hf), nil))
			_, got, err := ImportHF(dir)
			must(t, err)
			if len(got) != len(want) {
				t.Errorf("%d tensors imported, want %d", len(got), len(want))
			}
			for name, w := range want {
				if g, ok := got[name]; !ok || !bytes.Equal(tensorBytes(g), tensorBytes(w)) {
					t.Errorf("%s differs from the current file's", name)
				}
			}
		})
	}
}

// A Mistral without a sliding window (null, or one reaching max_position_embeddings) is
// a Llama: the Llama of testdata/hf/llama relabelled imports to the same model.
func TestImportHFMistral(t *testing.T) {
	src := filepath.Join("testdata", "hf", "llama")
	want, wantGlobal, err := ImportHF(src)
	must(t, err)
	for _, window := range []string{"null", "32"} {
		dir := t.TempDir()
		copyDir(t, src, dir)
		edit(t, filepath.Join(dir, hfConfigFile), `"model_type": "llama"`, `"model_type": "mistral", "sliding_window": `+window)
		m, global, err := ImportHF(dir)
		if err != nil || !bytes.Equal(m.Config, want.Config) || len(global) != len(wantGlobal) {
			t.Fatalf("sliding_window %s: %v\n%s\nwant\n%s", window, err, m.Config, want.Config)
		}
		for name, w := range wantGlobal {
			if !bytes.Equal(tensorBytes(global[name]), tensorBytes(w)) {
				t.Errorf("sliding_window %s: %s differs", window, name)
			}
		}
	}
}
