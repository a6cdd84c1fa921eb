package checkpoint

import (
	"encoding/json"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"megago/nn"
)

// readJSONMap reads a JSON object.
func readJSONMap(t *testing.T, path string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(readFile(t, path), &m); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return m
}

// jsonRoundTrip returns v as encoding/json reads it back (numbers float64, slices []any).
func jsonRoundTrip(t *testing.T, v map[string]any) map[string]any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	must(t, json.Unmarshal(b, &out))
	return out
}

// moeWant is what a config.json describes, in megago's terms.
type moeWant struct {
	layers, hidden, heads, kvHeads, headSize, ffn, vocab, maxPos int
	qkvBias, qkNorm                                              bool
	moe                                                          nn.MoEConfig
}

// checkMoEConfig checks the fields of c that w names.
func checkMoEConfig(t *testing.T, c nn.GPTConfig, w moeWant) {
	t.Helper()
	got := moeWant{c.NumLayers, c.Hidden, c.Heads, c.KVHeads, c.HeadSize, c.FFNHidden, c.Vocab, c.MaxPosition, c.QKVBias, c.QKNorm,
		nn.MoEConfig{NumExperts: c.MoE.NumExperts, TopK: c.MoE.TopK, FFNHidden: c.MoE.FFNHidden, PreSoftmax: c.MoE.PreSoftmax,
			SharedExpertFFNHidden: c.MoE.SharedExpertFFNHidden, SharedExpertGate: c.MoE.SharedExpertGate,
			AuxLossCoeff: c.MoE.AuxLossCoeff, LayerPattern: c.MoE.LayerPattern}}
	if got != w {
		t.Errorf("imported\n%+v\nwant\n%+v", got, w)
	}
	if c.Position != nn.RoPE || c.Norm != nn.RMSNormKind || c.Activation != nn.SwiGLU || c.Bias || !c.Untied || c.RoPETheta != 1e6 {
		t.Errorf("not an untied Llama-style model with rope_theta 10⁶: %+v", c.TransformerConfig)
	}
}

// The config.json files of published models (testdata/hfmoe/configs, as their
// repositories hold them) import to the sizes and routers they state, export back with
// the keys of their config class and the same values (but the token ids, which megago
// leaves null, and the sliding-window keys, inert without use_sliding_window), and that
// export imports to the same model.
func TestHFConfigMoEPublished(t *testing.T) {
	for _, tc := range []struct {
		file, kind string
		want       moeWant
		older      []string // keys the transformers version that wrote the file lacked
	}{
		{"Mixtral-8x7B-v0.1", "mixtral", moeWant{32, 4096, 32, 8, 128, 14336, 32000, 32768, false, false,
			nn.MoEConfig{NumExperts: 8, TopK: 2, FFNHidden: 14336, AuxLossCoeff: 0.02}}, []string{"head_dim", "router_jitter_noise"}},
		// Qwen2-MoE: softmax over all experts, the top 4 (8) not renormalized
		// (norm_topk_prob false): Megatron's pre-softmax router.
		{"Qwen1.5-MoE-A2.7B", "qwen2_moe", moeWant{24, 2048, 16, 16, 128, 5632, 151936, 8192, true, false,
			nn.MoEConfig{NumExperts: 60, TopK: 4, FFNHidden: 1408, PreSoftmax: true, SharedExpertFFNHidden: 5632,
				SharedExpertGate: true, AuxLossCoeff: 0.001}}, []string{"mlp_only_layers", "rope_scaling"}},
		{"Qwen2-57B-A14B", "qwen2_moe", moeWant{28, 3584, 28, 4, 128, 18944, 151936, 131072, true, false,
			nn.MoEConfig{NumExperts: 64, TopK: 8, FFNHidden: 2560, PreSoftmax: true, SharedExpertFFNHidden: 20480,
				SharedExpertGate: true, AuxLossCoeff: 0.001}}, []string{"mlp_only_layers", "rope_scaling"}},
		{"Qwen3-30B-A3B", "qwen3_moe", moeWant{48, 2048, 32, 4, 128, 6144, 151936, 40960, false, true,
			nn.MoEConfig{NumExperts: 128, TopK: 8, FFNHidden: 768, AuxLossCoeff: 0.001}}, nil},
		{"Qwen3-8B", "qwen3", moeWant{36, 4096, 32, 8, 128, 12288, 151936, 40960, false, true, nn.MoEConfig{}}, nil},
	} {
		t.Run(tc.file, func(t *testing.T) {
			golden := readJSONMap(t, filepath.Join("testdata", "hfmoe", "configs", tc.file+".json"))
			m, err := ModelFromHFConfig(golden)
			must(t, err)
			c, err := m.GPTConfig()
			must(t, err)
			checkMoEConfig(t, c, tc.want)
			out := map[string]any{}
			must(t, gptHFConfig(c, out))
			out = jsonRoundTrip(t, out)
			keys := slices.Sorted(func(yield func(string) bool) {
				for k := range out {
					if !yield(k) {
						return
					}
				}
			})
			want := slices.DeleteFunc(slices.Clone(hfConfigKeys[tc.kind]), func(k string) bool { return k == "torch_dtype" })
			if !slices.Equal(keys, want) {
				t.Errorf("exported keys\n%v\nwant (%s)\n%v", keys, tc.kind, want)
			}
			var onlyExported, onlyPublished []string
			for _, k := range keys {
				if _, ok := golden[k]; !ok {
					onlyExported = append(onlyExported, k)
				}
			}
			for k := range golden {
				if _, ok := out[k]; !ok && k != "transformers_version" && k != "torch_dtype" {
					onlyPublished = append(onlyPublished, k)
				}
			}
			slices.Sort(onlyPublished)
			if !slices.Equal(onlyExported, tc.older) || len(onlyPublished) > 0 && !slices.Equal(onlyPublished, []string{"bos_token_id", "eos_token_id"}) {
				t.Errorf("keys only exported %v (want %v), only in the published file %v", onlyExported, tc.older, onlyPublished)
			}
			for k, v := range out {
				switch k {
				case "bos_token_id", "eos_token_id", "sliding_window", "max_window_layers":
					continue
				}
				if g, ok := golden[k]; ok && !reflect.DeepEqual(g, v) {
					t.Errorf("exported %s = %v, the published config has %v", k, v, g)
				}
			}
			back, err := ModelFromHFConfig(out)
			must(t, err)
			if string(back.Config) != string(m.Config) {
				t.Errorf("the export imports to\n%s\nwant\n%s", back.Config, m.Config)
			}
		})
	}
}

// Qwen-MoE's decoder_sparse_step and mlp_only_layers become a LayerPattern (layer i has
// experts unless listed, when (i+1) is a multiple of the step), and export writes the
// smallest step giving the same layers alone, else step 1 and the dense layers; the
// export imports to the same pattern.
func TestHFConfigMoELayerPattern(t *testing.T) {
	for _, tc := range []struct {
		step     int
		mlpOnly  string
		pattern  string
		wantStep int
		wantMLP  []any
	}{
		{1, "[]", "", 1, []any{}},
		{1, "null", "", 1, []any{}},
		{2, "[]", "0,1,0,1,0,1", 2, []any{}},
		{3, "[]", "0,0,1,0,0,1", 3, []any{}},
		{1, "[0, 5]", "0,1,1,1,1,0", 1, []any{0.0, 5.0}},
		{2, "[3]", "0,1,0,0,0,1", 1, []any{0.0, 2.0, 3.0, 4.0}}, // no step alone gives it
	} {
		cfg := readJSONMap(t, filepath.Join("testdata", "hfmoe", "qwen2_moe", hfConfigFile))
		cfg["num_hidden_layers"], cfg["max_window_layers"], cfg["decoder_sparse_step"] = 6.0, 6.0, float64(tc.step)
		var list any
		must(t, json.Unmarshal([]byte(tc.mlpOnly), &list))
		cfg["mlp_only_layers"] = list
		m, err := ModelFromHFConfig(cfg)
		must(t, err)
		c, err := m.GPTConfig()
		must(t, err)
		if c.MoE.LayerPattern != tc.pattern {
			t.Errorf("step %d, mlp_only_layers %s: LayerPattern %q, want %q", tc.step, tc.mlpOnly, c.MoE.LayerPattern, tc.pattern)
		}
		out := map[string]any{}
		must(t, gptHFConfig(c, out))
		out = jsonRoundTrip(t, out)
		if out["decoder_sparse_step"] != float64(tc.wantStep) || !reflect.DeepEqual(out["mlp_only_layers"], tc.wantMLP) {
			t.Errorf("pattern %q exports as step %v, mlp_only_layers %v; want %d, %v", tc.pattern, out["decoder_sparse_step"], out["mlp_only_layers"], tc.wantStep, tc.wantMLP)
		}
		back, err := ModelFromHFConfig(out)
		must(t, err)
		if string(back.Config) != string(m.Config) {
			t.Errorf("pattern %q: the export imports to\n%s\nwant\n%s", tc.pattern, back.Config, m.Config)
		}
	}
}

// Settings megago's MoE does not implement are refused by name, on import and on export.
func TestHFConfigMoERefusals(t *testing.T) {
	for _, tc := range []struct {
		model, key, value, want string
	}{
		{"mixtral", "router_jitter_noise", "0.01", `router_jitter_noise = 0.01 (the router's input jitter is not implemented)`},
		{"mixtral", "sliding_window", "16", `sliding_window = 16 (sliding-window attention is not implemented`},
		{"mixtral", "num_experts_per_tok", "5", `num_experts_per_tok = 5 (want 1 to the 4 experts)`},
		{"mixtral", "num_local_experts", "null", `num_local_experts missing`},
		{"mixtral", "rope_scaling", `{"rope_type": "llama3", "factor": 8}`, `rope_scaling = map[factor:8 rope_type:llama3] (MixtralConfig has no rope scaling)`},
		{"qwen2_moe", "decoder_sparse_step", "0", `decoder_sparse_step = 0 (want ≥ 1)`},
		{"qwen2_moe", "mlp_only_layers", "[3]", `mlp_only_layers[0] = 3 (not a layer of the 3)`},
		{"qwen2_moe", "mlp_only_layers", `"all"`, `mlp_only_layers = "all" (not a list)`},
		{"qwen2_moe", "qkv_bias", "false", `qkv_bias = false (megago's Qwen2-MoE has q, k and v biases)`},
		{"qwen2_moe", "shared_expert_intermediate_size", "0", `shared_expert_intermediate_size = 0 (want ≥ 1)`},
		{"qwen2_moe", "use_sliding_window", "true", `use_sliding_window = true (with max_window_layers 2 < num_hidden_layers 3`},
		{"qwen3_moe", "attention_bias", "true", `attention_bias = true (Llama-style models have no biases`},
		{"qwen3_moe", "moe_intermediate_size", "0", `moe_intermediate_size = 0 (want ≥ 1)`},
		{"qwen3_moe", "hidden_act", `"gelu"`, `hidden_act gelu`},
	} {
		cfg := readJSONMap(t, filepath.Join("testdata", "hfmoe", tc.model, hfConfigFile))
		var v any
		must(t, json.Unmarshal([]byte(tc.value), &v))
		cfg[tc.key] = v
		if tc.key == "use_sliding_window" {
			cfg["max_window_layers"] = 2.0
		}
		if _, err := ModelFromHFConfig(cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %s = %s: %v, want an error with %q", tc.model, tc.key, tc.value, err, tc.want)
		}
	}

	mixtral := nn.LlamaConfig(2, 24, 4, 2, 32, 67)
	mixtral.HeadSize, mixtral.MoE = 6, nn.MoEConfig{NumExperts: 4, TopK: 2}
	for _, tc := range []struct {
		name string
		edit func(c *nn.GPTConfig)
		want string
	}{
		{"sigmoid", func(c *nn.GPTConfig) { c.MoE.ScoreFunction = "sigmoid" }, "a sigmoid router"},
		{"expert bias", func(c *nn.GPTConfig) { c.MoE.EnableExpertBias = true }, "expert biases"},
		{"pre-softmax Mixtral", func(c *nn.GPTConfig) { c.MoE.PreSoftmax = true }, "the softmax over all experts before the top k"},
		{"dense layer in a Mixtral", func(c *nn.GPTConfig) { c.MoE.LayerPattern = "1,0" }, "dense layers (Mixtral's are all MoE)"},
		{"shared expert in a Mixtral", func(c *nn.GPTConfig) { c.MoE.SharedExpertFFNHidden = 8 }, "a shared expert (only Qwen2-MoE has one)"},
		{"shared expert in a Qwen3-MoE", func(c *nn.GPTConfig) { c.QKNorm, c.MoE.SharedExpertFFNHidden = true, 8 }, "as qwen3_moe with a shared expert"},
		{"Qwen2-MoE without a shared expert", func(c *nn.GPTConfig) { c.QKVBias = true }, "as qwen2_moe with no gated shared expert"},
		{"ungated shared expert", func(c *nn.GPTConfig) { c.QKVBias, c.MoE.SharedExpertFFNHidden = true, 8 }, "no gated shared expert"},
		{"GPT-2 with experts", func(c *nn.GPTConfig) {
			*c = nn.GPTConfig{TransformerConfig: nn.TransformerConfig{NumLayers: 2, Hidden: 24, Heads: 4, HeadSize: 6, KVHeads: 4,
				FFNHidden: 96, Vocab: 67, MaxPosition: 16, Bias: true, MoE: nn.MoEConfig{NumExperts: 4}}}
		}, "experts outside a Llama-style model"},
	} {
		c := mixtral
		tc.edit(&c)
		if err := gptHFConfig(c, map[string]any{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		}
	}
}

// A config.json whose experts the weights present cannot hold is refused before any
// model is built (checkSize counts every expert's matrices).
func TestImportHFMoERefusesUntrustedExperts(t *testing.T) {
	for _, field := range []string{`"num_local_experts": 4`, `"intermediate_size": 32`} {
		dir := t.TempDir()
		copyDir(t, filepath.Join("testdata", "hfmoe", "mixtral"), dir)
		key := strings.SplitN(field, ":", 2)[0]
		edit(t, filepath.Join(dir, hfConfigFile), field, key+": 1000000000")
		var err error
		if n := allocated(func() { _, _, err = ImportHF(dir) }); n > refusalBudget {
			t.Errorf("%s: refusing allocated %d MB", key, n>>20)
		}
		if err == nil || !strings.Contains(err.Error(), "needs at least") {
			t.Errorf("%s 10⁹: %v, want the size refused", key, err)
		}
	}
}
