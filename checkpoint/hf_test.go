package checkpoint

import (
	"bytes"
	"context"
	"maps"
	"math"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"megago/nn"
	"megago/parallel"
	"megago/tensor"
)

// refRtol is the tolerance against PyTorch's float32 logits (the two sum in different
// orders): |got − want| ≤ refRtol·(|want| + max|want|). The absolute part, relative to the
// largest logit, covers logits near zero, which carry the rounding of sums of terms as
// large as the largest ones (BERT's post-LN layers amplify it most).
const refRtol = 1e-5

// reference reads testdata's reference.safetensors of a model.
func reference(t *testing.T, dir string) map[string]*tensor.Tensor {
	t.Helper()
	ref, _, err := ReadSafetensors(filepath.Join(dir, "reference.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	return ref
}

// modelLogits builds model m on tp goroutine ranks, loads global into it and returns the
// logits of the reference inputs [B, T, V] (vocabulary padding removed), and for BERT the
// binary head's.
func modelLogits(t *testing.T, m Model, global, ref map[string]*tensor.Tensor, tp int) (logits, binary []float64) {
	t.Helper()
	var mu sync.Mutex
	err := parallel.RunLocal(tp, func(c parallel.Comm) error {
		ctx := context.Background()
		dev := tensor.NewCPU()
		b := &nn.Builder{Dev: dev, DType: tensor.F32, RNG: tensor.NewRNG(1), TP: c}
		in := func(name string) *tensor.Tensor { return ref[name].To(dev) }
		p := nn.Eval(ctx)
		var out, bin *tensor.Tensor
		var vocab int
		switch m.Arch {
		case ArchGPT:
			cfg, err := m.GPTConfig()
			if err != nil {
				return err
			}
			model, err := nn.NewGPT(b, cfg, nn.Stage{})
			if err != nil {
				return err
			}
			if err := SetParams(model.Params(), m, global); err != nil {
				return err
			}
			out, vocab = model.Forward(p, in("input_ids"), nil), cfg.Vocab
		case ArchBERT:
			cfg, err := m.BERTConfig()
			if err != nil {
				return err
			}
			model, err := nn.NewBERT(b, cfg, nn.Stage{})
			if err != nil {
				return err
			}
			if err := SetParams(model.Params(), m, global); err != nil {
				return err
			}
			o := model.Forward(p, nn.BERTInput{IDs: in("input_ids"), TokenTypes: in("token_type_ids"), Attend: in("attention_mask")})
			out, bin, vocab = o.LMLogits, o.BinaryLogits, cfg.Vocab
		case ArchT5:
			cfg, err := m.T5Config()
			if err != nil {
				return err
			}
			model, err := nn.NewT5(b, cfg, nn.Stage{})
			if err != nil {
				return err
			}
			if err := SetParams(model.Params(), m, global); err != nil {
				return err
			}
			out, vocab = model.Forward(p, nn.T5Input{IDs: in("input_ids"), Attend: in("attention_mask"), DecoderIDs: in("decoder_input_ids")}), cfg.Vocab
		}
		full := parallel.GatherFromTP(ctx, c, out.Detach())
		if c.Rank() == 0 {
			mu.Lock()
			logits = tensor.ToSlice[float64](full.Narrow(-1, 0, vocab))
			if bin != nil {
				binary = tensor.ToSlice[float64](bin)
			}
			mu.Unlock()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return logits, binary
}

// requireClose checks got against PyTorch's values within refRtol and refAtol.
func requireClose(t *testing.T, what string, got []float64, want *tensor.Tensor) {
	t.Helper()
	w := tensor.ToSlice[float64](want)
	if len(got) != len(w) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(w))
	}
	scale := 0.0
	for _, v := range w {
		scale = max(scale, math.Abs(v))
	}
	bad, worst := 0, 0.0
	for i := range got {
		worst = max(worst, math.Abs(got[i]-w[i])/(math.Abs(w[i])+scale))
		if !(math.Abs(got[i]-w[i]) <= refRtol*(math.Abs(w[i])+scale)) {
			if bad < 3 {
				t.Errorf("%s[%d] = %.9g, want %.9g", what, i, got[i], w[i])
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d values differ", what, bad, len(got))
	}
	t.Logf("%s: largest |got − want| / (|want| + max|want|) = %.2g (max|want| = %.3g)", what, worst, scale)
}

// The Hugging Face models of testdata/hf (GPT-2, BERT, Llama and T5, written by gen.py
// from the hand-written references of nn/testdata/golden) are imported, give PyTorch's logits at TP = 1 and
// TP = 2, and export back to the same file, byte for byte.
func TestHuggingFace(t *testing.T) {
	for _, name := range []string{"gpt2", "bert", "llama", "t5"} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join("testdata", "hf", name)
			m, global, err := ImportHF(dir)
			if err != nil {
				t.Fatal(err)
			}
			ref := reference(t, dir)
			for _, tp := range []int{1, 2} {
				logits, binary := modelLogits(t, m, global, ref, tp)
				requireClose(t, "logits", logits, ref["logits"])
				if want, ok := ref["seq_relationship"]; ok {
					requireClose(t, "seq_relationship", binary, want)
				}
			}

			out := t.TempDir()
			if err := ExportHF(out, m, global); err != nil {
				t.Fatal(err)
			}
			orig, _, err := ReadSafetensors(filepath.Join(dir, hfWeightsFile))
			must(t, err)
			back, meta, err := ReadSafetensors(filepath.Join(out, hfWeightsFile))
			must(t, err)
			if len(back) != len(orig) || meta["format"] != "pt" {
				t.Errorf("exported %d tensors (metadata %v), want %d", len(back), meta, len(orig))
			}
			for k, o := range orig {
				b, ok := back[k]
				if !ok || b.DType() != o.DType() || !b.Shape().Equal(o.Shape()) || !bytes.Equal(tensorBytes(b), tensorBytes(o)) {
					t.Errorf("%s: exported %v, want %v %v with the same bytes", k, b, o.DType(), o.Shape())
				}
			}
			if a, b := readFile(t, filepath.Join(dir, hfWeightsFile)), readFile(t, filepath.Join(out, hfWeightsFile)); !bytes.Equal(a, b) {
				t.Errorf("the exported model.safetensors differs from the original (%d and %d bytes)", len(b), len(a))
			}
			cfg, _, err := ReadHF(out)
			must(t, err)
			again, err := ModelFromHFConfig(cfg)
			if err != nil || again.Compatible(m) != nil || !bytes.Equal(again.Config, m.Config) {
				t.Errorf("config.json does not round-trip: %v\n%s\n%s", err, again.Config, m.Config)
			}
		})
	}
}

// llamaCfg returns a tiny LlamaConfig-style config.json of model type kind with the
// entries of edit added.
func llamaCfg(kind string, edit map[string]any) map[string]any {
	cfg := map[string]any{"model_type": kind, "num_hidden_layers": 2.0, "hidden_size": 8.0, "num_attention_heads": 2.0,
		"intermediate_size": 8.0, "vocab_size": 10.0, "max_position_embeddings": 64.0}
	maps.Copy(cfg, edit)
	return cfg
}

// llama3Scaling returns Llama 3.1's rope_scaling with the entries of edit replaced.
func llama3Scaling(edit map[string]any) map[string]any {
	s := map[string]any{"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
		"original_max_position_embeddings": 8192.0}
	maps.Copy(s, edit)
	return s
}

// Hugging Face configurations megago cannot represent are refused, naming the setting
// and its value.
func TestHFConfigRejects(t *testing.T) {
	for _, tc := range []struct {
		cfg  map[string]any
		want string
	}{
		{map[string]any{"model_type": "falcon"}, `model_type "falcon"`},
		{map[string]any{"model_type": "gpt2", "n_layer": 2.0}, "n_embd missing"},
		{llamaCfg("llama", map[string]any{"rope_scaling": map[string]any{"type": "linear"}}), `rope_scaling.type = "linear" (megago implements default and llama3`},
		{llamaCfg("llama", map[string]any{"rope_scaling": llama3Scaling(map[string]any{"low_freq_factor": 2.0})}),
			"rope_scaling.low_freq_factor = 2 (megago's llama3 scaling has 1, as Llama 3.1)"},
		{llamaCfg("llama", map[string]any{"rope_scaling": llama3Scaling(map[string]any{"original_max_position_embeddings": 4096.0})}),
			"rope_scaling.original_max_position_embeddings = 4096 (megago's llama3 scaling has 8192"},
		{llamaCfg("llama", map[string]any{"rope_scaling": llama3Scaling(map[string]any{"factor": -1.0})}), "rope_scaling.factor = -1 (want a positive number)"},
		{llamaCfg("llama", map[string]any{"rope_parameters": map[string]any{"rope_type": "yarn", "rope_theta": 1e4}}), `rope_parameters.rope_type = "yarn"`},
		{llamaCfg("llama", map[string]any{"attention_bias": true}), "attention_bias = true (Llama-style models have no biases"},
		{llamaCfg("llama", map[string]any{"mlp_bias": true}), "mlp_bias = true"},
		{llamaCfg("mistral", map[string]any{"sliding_window": 16.0}), "sliding_window = 16 (sliding-window attention is not implemented; a window of at least max_position_embeddings 64 is accepted)"},
		{llamaCfg("qwen2", map[string]any{"use_sliding_window": true, "max_window_layers": 1.0}),
			"use_sliding_window = true (with max_window_layers 1 < num_hidden_layers 2: sliding-window attention is not implemented)"},
		{llamaCfg("qwen2", map[string]any{"layer_types": []any{"full_attention", "sliding_attention"}}),
			`layer_types[1] = "sliding_attention" (only full_attention is implemented)`},
		{llamaCfg("llama", map[string]any{"hidden_act": "gelu"}), "hidden_act gelu"},
		{llamaCfg("llama", map[string]any{"num_key_value_heads": 3.0}), "num_key_value_heads = 3 (must divide num_attention_heads 2"},
		{llamaCfg("llama", map[string]any{"head_dim": 5.0}), "head_dim = 5 (with hidden_size 8 and num_attention_heads 2: RoPE needs an even head size)"},
		{map[string]any{"model_type": "gpt2", "n_layer": 2.0, "n_embd": 8.0, "n_head": 2.0, "vocab_size": 10.0, "n_positions": 8.0,
			"scale_attn_by_inverse_layer_idx": true}, "scale_attn_by_inverse_layer_idx = true"},
		{map[string]any{"model_type": "bert", "num_hidden_layers": 2.0, "hidden_size": 8.0, "num_attention_heads": 2.0,
			"vocab_size": 10.0, "max_position_embeddings": 8.0, "hidden_act": "swish"}, "hidden_act swish"},
	} {
		if _, err := ModelFromHFConfig(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want %q", tc.cfg, err, tc.want)
		}
	}
	// What is accepted: Mistral without a window reaching max_position_embeddings, Qwen2
	// without sliding layers, Llama 3.1's scaling (as transformers 4 and 5 write it).
	for _, cfg := range []map[string]any{
		llamaCfg("mistral", map[string]any{"sliding_window": nil}),
		llamaCfg("mistral", map[string]any{"sliding_window": 64.0}),
		llamaCfg("qwen2", map[string]any{"use_sliding_window": false, "sliding_window": 4096.0, "max_window_layers": 1.0}),
		llamaCfg("llama", map[string]any{"rope_scaling": llama3Scaling(nil)}),
		llamaCfg("llama", map[string]any{"rope_parameters": map[string]any{"rope_type": "default", "rope_theta": 5e5}}),
	} {
		if _, err := ModelFromHFConfig(cfg); err != nil {
			t.Errorf("%v: %v", cfg, err)
		}
	}
	// Export refuses a GPT Hugging Face has no class for.
	c := harnessConfig(true)
	c.Norm = nn.RMSNormKind
	if err := ExportHF(t.TempDir(), GPTModel(c), nil); err == nil {
		t.Error("exported a GPT-2 with RMSNorm")
	}
	// Nor one whose Megatron variants config.json would not describe.
	for _, edit := range []func(c *nn.GPTConfig){
		func(c *nn.GPTConfig) { c.QKNorm, c.QKVBias = true, true }, // query/key norms alone are a Qwen3
		func(c *nn.GPTConfig) { c.RotaryPercent = 0.5 },
		func(c *nn.GPTConfig) { c.QKVBias, c.HeadSize = true, 8 }, // Qwen2's config has no head_dim
	} {
		c := nn.LlamaConfig(2, 16, 4, 2, 32, 50)
		c.TransformerConfig = c.Defaults()
		if err := gptHFConfig(c, map[string]any{}); err != nil {
			t.Fatalf("Llama: %v", err)
		}
		edit(&c)
		if err := gptHFConfig(c, map[string]any{}); err == nil || !strings.Contains(err.Error(), "is not implemented") {
			t.Errorf("exported %+v: %v", c, err)
		}
	}
}
