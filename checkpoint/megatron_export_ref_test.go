package checkpoint

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"megago/nn"
	"megago/tensor"
)

// updateMegatronExportEnv, set to 1, makes TestExportMegatronMatchesPyTorch rewrite
// testdata/megatron/export from its models; megatron_reference.py then rewrites the
// reference logits.
const updateMegatronExportEnv = "MEGAGO_UPDATE_MEGATRON_EXPORT"

// megatronExportCases are the seeded megago GPTs exported to Megatron at TP=2 × PP=2: a
// Llama-3-style model with every Megatron variant megago has (grouped-query attention,
// kv_channels × heads ≠ hidden, Llama 3.1 rope scaling, partial rotary, QK norms, a
// QKV bias alone), under Transformer Engine's names at an iteration; and a GPT-2-style
// model with tied embeddings (so the last stage holds the output layer's copy), biases
// and the erf GeLU, under local names as a release.
func megatronExportCases() []struct {
	name string
	cfg  nn.GPTConfig
	opts MegatronExportOptions
} {
	llama := nn.LlamaConfig(4, 24, 4, 2, 40, 61)
	llama.HeadSize, llama.MaxPosition, llama.VocabMultiple, llama.NormEps = 8, 32, 16, 1e-5
	llama.RoPETheta, llama.RoPEScaling, llama.RotaryPercent, llama.QKNorm, llama.QKVBias = 500000, 8, 0.5, true, true
	gpt2 := nn.GPTConfig{TransformerConfig: nn.TransformerConfig{NumLayers: 2, Hidden: 24, Heads: 4, FFNHidden: 96,
		Vocab: 50, MaxPosition: 16, Activation: nn.GeLUErf, Bias: true}, VocabMultiple: 16}
	return []struct {
		name string
		cfg  nn.GPTConfig
		opts MegatronExportOptions
	}{
		{"llama3_tp2_pp2", llama, MegatronExportOptions{TP: 2, PP: 2, Iteration: 5, ConsumedSamples: 40}},
		{"gpt2_tp2_pp2", gpt2, MegatronExportOptions{TP: 2, PP: 2, Local: true, TokenizerType: "GPT2BPETokenizer"}},
	}
}

// exportInputs returns the token ids [2, 12] the Megatron export references are run on.
func exportInputs(vocab int) *tensor.Tensor {
	ids := make([]int64, 2*12)
	for i := range ids {
		ids[i] = int64((i*7 + i*i*3 + 5) % vocab)
	}
	return tensor.FromSlice(tensor.NewCPU(), ids, 2, 12)
}

// GPTs made by megago, exported to Megatron-LM legacy checkpoints at TP=2 × PP=2, give
// the logits that testdata/megatron_reference.py computed from the exported files, read
// as Megatron reads them (torch.load, the shards merged as Megatron's checkpoint loader
// merges them, the GPT Megatron-core's arguments describe): the export is pinned byte for
// byte by testdata/megatron/export/<case>, and the reference logits of those bytes match
// the megago model's own at TP = 1 and TP = 2. After a change to the export or to megago's
// generator, regenerate with
//
//	MEGAGO_UPDATE_MEGATRON_EXPORT=1 go test ./checkpoint -run TestExportMegatronMatchesPyTorch
//	cd checkpoint/testdata && for c in llama3_tp2_pp2 gpt2_tp2_pp2; do
//	  /usr/bin/python3 megatron_reference.py megatron/export/$c megatron/export/$c/inputs.safetensors megatron/export/$c/reference.safetensors; done
func TestExportMegatronMatchesPyTorch(t *testing.T) {
	update := os.Getenv(updateMegatronExportEnv) == "1"
	for _, tc := range megatronExportCases() {
		t.Run(tc.name, func(t *testing.T) {
			m, global := exportGPT(t, tc.cfg, 20261130)
			out := t.TempDir()
			if _, err := ExportMegatron(out, m, global, tc.opts); err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join("testdata", "megatron", "export", tc.name)
			if update {
				must(t, os.RemoveAll(dir))
				copyDir(t, out, dir)
				ids := map[string]*tensor.Tensor{"input_ids": exportInputs(tc.cfg.Vocab)}
				must(t, WriteSafetensors(filepath.Join(dir, "inputs.safetensors"), ids, nil))
				t.Skip("rewrote " + dir + "; now run testdata/megatron_reference.py on it")
			}
			compareTrees(t, out, dir)
			ref := reference(t, dir)
			if got, want := ref["logits"].Shape(), (tensor.Shape{2, 12, tc.cfg.Vocab}); !got.Equal(want) {
				t.Fatalf("reference logits %v, want %v", got, want)
			}
			for _, tp := range []int{1, 2} {
				logits, _ := modelLogits(t, m, global, ref, tp)
				requireClose(t, "logits", logits, ref["logits"])
			}
		})
	}
}

// compareTrees checks that every file under got is in want with the same bytes, and that
// want holds no other checkpoint file (the references beside it aside).
func compareTrees(t *testing.T, got, want string) {
	t.Helper()
	seen := map[string]bool{}
	must(t, filepath.WalkDir(got, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(got, path)
		seen[rel] = true
		if w, err := os.ReadFile(filepath.Join(want, rel)); err != nil || !bytes.Equal(readFile(t, path), w) {
			t.Errorf("exported %s differs from %s (%v)", rel, filepath.Join(want, rel), err)
		}
		return nil
	}))
	must(t, filepath.WalkDir(want, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(path, ".safetensors") {
			return err
		}
		if rel, _ := filepath.Rel(want, path); !seen[rel] {
			t.Errorf("%s is not in the export", rel)
		}
		return nil
	}))
}
