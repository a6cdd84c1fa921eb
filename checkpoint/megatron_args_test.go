package checkpoint

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nlpodyssey/gopickle/types"

	"megago/nn"
	"megago/tensor"
)

// argsDict returns Megatron arguments holding kv (name, value, name, value, ...).
func argsDict(kv ...any) megatronArgs {
	d := types.NewDict()
	for i := 0; i < len(kv); i += 2 {
		d.Set(kv[i], kv[i+1])
	}
	return megatronArgs{d}
}

// The GeLU Megatron computes, by its source: Megatron-core ignores --openai-gelu and uses
// the tanh form only through the fused bias-GeLU (biases and --bias-gelu-fusion, on by
// default) or Transformer Engine's activation; the legacy model took --openai-gelu first.
func TestMegatronActivation(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   megatronArgs
		legacy bool
		want   nn.Activation
	}{
		{"core defaults (biases, fusion on)", argsDict(), false, nn.GeLU},
		{"core --no-bias-gelu-fusion", argsDict("bias_gelu_fusion", false), false, nn.GeLUErf},
		{"core --disable-bias-linear", argsDict("add_bias_linear", false, "bias_gelu_fusion", false), false, nn.GeLUErf},
		{"core old disable_bias_linear", argsDict("disable_bias_linear", true), false, nn.GeLUErf},
		{"core ignores --openai-gelu", argsDict("openai_gelu", true, "bias_gelu_fusion", false), false, nn.GeLUErf},
		{"core Transformer Engine activation", argsDict("use_te_activation_func", true, "bias_gelu_fusion", false), false, nn.GeLU},
		{"core SwiGLU", argsDict("swiglu", true, "openai_gelu", true), false, nn.SwiGLU},
		{"legacy --openai-gelu", argsDict("openai_gelu", true, "bias_gelu_fusion", false), true, nn.GeLU},
		{"legacy --onnx-safe", argsDict("onnx_safe", true), true, nn.GeLUErf},
		{"legacy defaults (fused bias-GeLU)", argsDict(), true, nn.GeLU},
		{"legacy no fusion", argsDict("bias_gelu_fusion", false), true, nn.GeLUErf},
	} {
		got, err := megatronActivation(tc.args, tc.legacy)
		if err != nil || got != tc.want {
			t.Errorf("%s: %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
	if _, err := megatronActivation(argsDict("squared_relu", true), false); err == nil || !strings.Contains(err.Error(), "squared ReLU") {
		t.Errorf("squared_relu: %v", err)
	}
}

// Arguments megago's GPT cannot take are refused with an error naming each and why.
func TestMegatronConfigRefusals(t *testing.T) {
	base := []any{"num_layers", 2, "hidden_size", 24, "num_attention_heads", 4, "padded_vocab_size", 64}
	for _, tc := range []struct {
		name string
		args []any
		want []string
	}{
		{"GQA groups", []any{"group_query_attention", true, "num_query_groups", 3}, []string{"num_query_groups=3", "KVHeads = 3 must divide Heads = 4"}},
		{"GQA without groups", []any{"group_query_attention", true}, []string{"group_query_attention without num_query_groups"}},
		{"head size", []any{"position_embedding_type", "rope", "kv_channels", 5}, []string{"kv_channels=5", "HeadSize = 5 must be even with RoPE"}},
		{"interleaved rotary", []any{"position_embedding_type", "rope", "rotary_interleaved", true}, []string{"interleaved rotary embeddings"}},
		{"rotary interpolation", []any{"position_embedding_type", "rope", "rotary_seq_len_interpolation_factor", 4.0}, []string{"rotary position interpolation"}},
		{"MoE", []any{"num_experts", 8}, []string{"num_experts=8 (mixture of experts)"}},
		{"position type", []any{"position_embedding_type", "yarn"}, []string{"position_embedding_type yarn"}},
		{"norm", []any{"normalization", "L2Norm"}, []string{"normalization L2Norm"}},
		{"zero-centered gamma", []any{"apply_layernorm_1p", true}, []string{"zero-centered norm weights"}},
		{"virtual pipeline", []any{"virtual_pipeline_model_parallel_size", 2}, []string{"virtual_pipeline_model_parallel_size=2"}},
		{"several", []any{"squared_relu", true, "multi_latent_attention", true}, []string{"squared ReLU", "multi-latent attention"}},
	} {
		_, err := megatronConfig(argsDict(append(append([]any{}, base...), tc.args...)...), 0, &MegatronInfo{}, false)
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v, want an error containing %q", tc.name, err, w)
			}
		}
	}
	if _, err := megatronConfig(argsDict(append(base, "position_embedding_type", "rope", "rotary_seq_len_interpolation_factor", 1.0)...), 0, &MegatronInfo{}, false); err != nil {
		t.Errorf("an interpolation factor of 1: %v", err)
	}
}

// rewriteMegatron writes a TP=2 Megatron checkpoint of cfg and global in dir, built from
// ExportMegatron's layout with editArgs and editModel applied to its arguments and to
// each rank's state dict.
func rewriteMegatron(t *testing.T, dir string, cfg nn.GPTConfig, global map[string]*tensor.Tensor,
	editArgs func(pickleNamespace) pickleNamespace, editModel func(tp int, m pickleOrderedDict)) {
	t.Helper()
	opts := MegatronExportOptions{TP: 2, PP: 1, Local: true, Iteration: 1}
	cfg.TransformerConfig = cfg.TransformerConfig.Defaults()
	padded := nn.PaddedVocab(cfg.Vocab, cfg.VocabMultiple, 2)
	layout := megatronLayout(cfg, false)
	whole := megatronWhole(layout, global, cfg.Vocab, padded, tensor.F32)
	args := editArgs(megatronExportArgs(cfg, opts, tensor.F32, padded))
	for r := range 2 {
		model := megatronRankState(layout, whole, cfg, 0, r, 2, 1)
		editModel(r, model)
		path := megatronRankFile(filepath.Join(dir, IterDir(1)), r, -1)
		must(t, os.MkdirAll(filepath.Dir(path), 0o755))
		f, err := os.Create(path)
		must(t, err)
		must(t, writeTorchZip(f, "model_optim_rng", pickleDict{{"args", args}, {"checkpoint_version", 3.0}, {"iteration", 1}, {"model", model}}))
		must(t, f.Close())
	}
	must(t, os.WriteFile(filepath.Join(dir, TrackerFile), []byte("1"), 0o644))
}

// A replicated tensor that differs between TP ranks is a warning naming it and the ranks;
// tensors whose shapes the arguments do not give are refused with the arguments that
// gave the expected size.
func TestMegatronImportChecks(t *testing.T) {
	m, global, _, err := ImportMegatron(filepath.Join("testdata", "megatron", "llama_tp2_pp2"), MegatronOptions{})
	must(t, err)
	cfg, err := m.GPTConfig()
	must(t, err)
	same := func(a pickleNamespace) pickleNamespace { return a }

	dir := t.TempDir()
	rewriteMegatron(t, dir, cfg, global, same, func(tp int, m pickleOrderedDict) {
		for i, it := range m {
			if it.Key == "decoder.layers.1.input_layernorm.weight" && tp == 1 {
				pt := *it.Value.(*pickleTensor)
				pt.Data = append([]byte{}, pt.Data...)
				pt.Data[5] ^= 1 // a bfloat16's low mantissa bit
				m[i].Value = &pt
			}
		}
	})
	_, _, info, err := ImportMegatron(dir, MegatronOptions{})
	must(t, err)
	if len(info.Warnings) != 1 || !strings.Contains(info.Warnings[0], "decoder.layers.1.input_layernorm.weight") ||
		!strings.Contains(info.Warnings[0], "rank(s) 1 differ from rank 0") {
		t.Errorf("warnings %q", info.Warnings)
	}

	dir = t.TempDir()
	rewriteMegatron(t, dir, cfg, global, func(a pickleNamespace) pickleNamespace {
		for i := range a {
			if a[i].Key == "num_query_groups" {
				a[i].Value = 4 // the tensors have 2 groups
			}
		}
		return a
	}, func(int, pickleOrderedDict) {})
	_, _, _, err = ImportMegatron(dir, MegatronOptions{})
	if err == nil || !strings.Contains(err.Error(), "num_query_groups 4 × (num_attention_heads 4 / num_query_groups + 2) × kv_channels 6 = 72 rows") {
		t.Errorf("a QKV of 2 groups read with num_query_groups 4: %v", err)
	}
}
