package checkpoint

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"megago/nn"
	"megago/parallel"
	"megago/tensor"
)

// seededParams returns global tensors for the parameters ps, every one drawn from
// megago's generator seeded with seed (weights N(0, 0.2²), biases N(0, 0.1²), weights
// named *norm.weight 1 + N(0, 0.1²)), vocabulary padding included, so that no value is trivial and
// the padding must be dropped.
func seededParams(ps []*nn.Param, seed uint64) map[string]*tensor.Tensor {
	dev := tensor.NewCPU()
	rng := tensor.NewRNG(seed).Named("export")
	global := map[string]*tensor.Tensor{}
	for _, p := range ps {
		mean, std := 0.0, 0.2
		switch {
		case strings.Contains(p.Name, "norm.weight"):
			mean, std = 1, 0.1
		case strings.HasSuffix(p.Name, ".bias"):
			std = 0.1
		}
		global[p.Name] = rng.Named(p.Name).Normal(dev, tensor.F32, tensor.Whole(p.GlobalShape...), mean, std)
	}
	return global
}

// roundTripGPTs are the Llama-family models of the round trip, each exported to
// testdata/export/<name> and read by gen_export.py:
//
//   - llama: Llama 3.1-style, 4 heads of 8 (head_dim ≠ hidden/heads) in 2 KV groups,
//     untied, rope_theta 500000 with Llama 3.1's rope scaling (factor 8), vocabulary 73;
//   - qwen2: Qwen2-style, q, k and v biases, tied embeddings, 4 heads of 6 in 2 KV
//     groups, rope_theta 10⁶, vocabulary 61.
func roundTripGPTs() map[string]nn.GPTConfig {
	llama := nn.LlamaConfig(2, 24, 4, 2, 32, 73)
	llama.HeadSize, llama.MaxPosition, llama.NormEps = 8, 64, 1e-5
	llama.RoPETheta, llama.RoPEScaling = 500000, 8
	qwen := nn.LlamaConfig(2, 24, 4, 2, 32, 61)
	qwen.MaxPosition, qwen.RoPETheta, qwen.QKVBias, qwen.Untied = 64, 1e6, true, false
	return map[string]nn.GPTConfig{"llama": llama, "qwen2": qwen}
}

// exportGPT returns the Model of cfg and seeded global parameters.
func exportGPT(t *testing.T, cfg nn.GPTConfig, seed uint64) (Model, map[string]*tensor.Tensor) {
	t.Helper()
	m, err := nn.NewGPT(&nn.Builder{Dev: tensor.NewCPU(), DType: tensor.F32, RNG: tensor.NewRNG(1), TP: parallel.Self()}, cfg, nn.Stage{})
	if err != nil {
		t.Fatal(err)
	}
	return GPTModel(m.Config), seededParams(m.Params(), seed)
}

// HF round trip: a Llama 3.1-style and a Qwen2-style model made by megago are exported
// to Hugging Face's format (pinned byte for byte by testdata/export/<model>), and
//
//   - an independent PyTorch reading of the export (gen_export.py's decoder, written
//     from the Llama and Qwen2 architectures: RoPE with Llama 3.1's scaling, GQA, QKV
//     biases, tied embeddings) gives, in reference.safetensors, the megago model's
//     logits at TP = 1 and TP = 2;
//   - re-imported from a sharded model.safetensors.index.json layout, and from the
//     pytorch_model.bin files gen_export.py wrote from the export (testdata/export/
//     <model>/bin: Llama's sharded with pytorch_model.bin.index.json, Qwen2's one file
//     holding the tied lm_head.weight beside the embedding, as torch.save does), they
//     give the megago model's logits exactly.
//
// Regenerate after a change to the export with
//
//	MEGAGO_UPDATE_EXPORT=1 go test ./checkpoint -run 'TestHFRoundTrip|TestExportHFMatchesPyTorch'
//	/usr/bin/python3 checkpoint/testdata/gen_export.py
func TestHFRoundTrip(t *testing.T) {
	update := os.Getenv(updateExportEnv) == "1"
	for name, cfg := range roundTripGPTs() {
		t.Run(name, func(t *testing.T) {
			m, global := exportGPT(t, cfg, 20261201)
			out := t.TempDir()
			must(t, ExportHF(out, m, global))
			dir := filepath.Join("testdata", "export", name)
			for _, f := range []string{hfWeightsFile, hfConfigFile} {
				got := readFile(t, filepath.Join(out, f))
				if update {
					must(t, os.MkdirAll(dir, 0o755))
					must(t, os.WriteFile(filepath.Join(dir, f), got, 0o644))
				} else if want := readFile(t, filepath.Join(dir, f)); !bytes.Equal(got, want) {
					t.Errorf("the exported %s differs from %s (%d and %d bytes)", f, filepath.Join(dir, f), len(got), len(want))
				}
			}
			if update {
				t.Skip("rewrote " + dir + "; now run testdata/gen_export.py")
			}
			ref := reference(t, dir)
			want, _ := modelLogits(t, m, global, ref, 1)
			for _, tp := range []int{1, 2} {
				logits, _ := modelLogits(t, m, global, ref, tp)
				requireClose(t, "logits", logits, ref["logits"])
			}
			if cfg.RoPEScaling != 0 { // the reference sees the scaling: without it the logits differ
				plain := cfg
				plain.RoPEScaling = 0
				logits, _ := modelLogits(t, GPTModel(plain), global, ref, 1)
				if d := maxRelDiff(logits, tensorF64(ref["logits"])); d < 100*refRtol {
					t.Errorf("logits without rope scaling differ from the reference by only %.2g", d)
				}
			}

			sharded := t.TempDir()
			must(t, ExportHFWith(sharded, m, global, HFExportOptions{MaxShardSize: 8 << 10}))
			if _, err := os.Stat(filepath.Join(sharded, hfWeightsFile)); err == nil {
				t.Errorf("a sharded export wrote %s", hfWeightsFile)
			}
			for _, src := range []string{sharded, filepath.Join(dir, "bin")} {
				m2, global2, err := ImportHF(src)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(m2.Config, m.Config) {
					t.Errorf("%s: imported configuration\n%s\nwant\n%s", src, m2.Config, m.Config)
				}
				if got, _ := modelLogits(t, m2, global2, ref, 1); !slices.Equal(got, want) {
					t.Errorf("%s: the imported model's logits differ from megago's: %.3g", src, maxRelDiff(got, want))
				}
			}
		})
	}
}

// The exported config.json has exactly the keys transformers writes for its model type
// (hfConfigKeys, from transformers' configuration classes): GPT-2's tie_word_embeddings
// only when false.
func TestHFExportConfigKeys(t *testing.T) {
	gpt2Tied, gpt2Untied := harnessConfig(true), harnessConfig(false)
	cfgs := roundTripGPTs()
	for _, tc := range []struct {
		name, kind string
		cfg        nn.GPTConfig
		extra      []string
	}{
		{"gpt2 tied", "gpt2", gpt2Tied, nil},
		{"gpt2 untied", "gpt2", gpt2Untied, []string{"tie_word_embeddings"}},
		{"llama", "llama", cfgs["llama"], nil},
		{"qwen2", "qwen2", cfgs["qwen2"], nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, global := exportGPT(t, tc.cfg, 1)
			dir := t.TempDir()
			must(t, ExportHF(dir, m, global))
			var got map[string]any
			must(t, json.Unmarshal(readFile(t, filepath.Join(dir, hfConfigFile)), &got))
			want := append(slices.Clone(hfConfigKeys[tc.kind]), tc.extra...)
			slices.Sort(want)
			if keys := sortedKeys(got); !slices.Equal(keys, want) || got["model_type"] != tc.kind {
				t.Errorf("config.json of model_type %v has keys\n%v\nwant\n%v", got["model_type"], keys, want)
			}
			back, err := ModelFromHFConfig(got)
			if err != nil || back.Compatible(m) != nil { // dropout is not read back (GPT-2's import keeps 0)
				t.Errorf("config.json reads back as %s (%v), want %s", back.Config, err, m.Config)
			}
		})
	}
}
