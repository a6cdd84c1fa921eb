package checkpoint

import (
	"archive/zip"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"megago/nn"
	"megago/tensor"
)

// The Megatron-LM legacy checkpoints of testdata/megatron (written by gen.py with
// torch.save: TP=2 GPT-2 in float32; TP=2 × PP=2 Llama-style in bfloat16 with
// grouped-query attention and SwiGLU; the same GPT-2 under Transformer Engine's names with
// empty _extra_state tensors, and as the legacy (pre-core) model saved it, at TP=2 × PP=2;
// a Llama-3-style model with rope scaling, partial rotary, QK norms and a QKV bias under
// Transformer Engine's names) are merged into megago and give the reference logits
// (the plain GPT-2's for its TE and legacy copies), directly and, where Hugging Face has
// the architecture, after export to Hugging Face and import back.
func TestMegatron(t *testing.T) {
	for _, tc := range []struct {
		name   string
		vocab  int
		tp, pp int
		dtype  tensor.DType
		arch   func(c nn.GPTConfig) bool
		ref    string // the fixture whose reference logits this one gives
		te     bool   // Transformer Engine's names
		legacy bool
		hf     bool // Hugging Face has the architecture
	}{
		{"gpt2_tp2", 50, 2, 1, tensor.F32, func(c nn.GPTConfig) bool {
			return c.Activation == nn.GeLU && c.Position == nn.LearnedPositions && !c.Untied && c.Bias
		}, "gpt2_tp2", false, false, true},
		{"llama_tp2_pp2", 0, 2, 2, tensor.BF16, func(c nn.GPTConfig) bool {
			return c.Activation == nn.SwiGLU && c.Position == nn.RoPE && c.Untied && c.KVHeads == 2 && c.NumLayers == 4
		}, "llama_tp2_pp2", false, false, true},
		{"gpt2_te_tp2_pp2", 50, 2, 2, tensor.F32, func(c nn.GPTConfig) bool {
			return c.Activation == nn.GeLU && c.Position == nn.LearnedPositions && !c.Untied && c.Bias
		}, "gpt2_tp2", true, false, true},
		{"gpt2_legacy_tp2_pp2", 50, 2, 2, tensor.F32, func(c nn.GPTConfig) bool {
			return c.Activation == nn.GeLU && c.Position == nn.LearnedPositions && !c.Untied && c.Bias
		}, "gpt2_tp2", false, true, true},
		{"llama3_te_tp2_pp2", 0, 2, 2, tensor.BF16, func(c nn.GPTConfig) bool {
			return c.Activation == nn.SwiGLU && c.Norm == nn.RMSNormKind && c.KVHeads == 2 && c.HeadSize == 8 && c.RoPETheta == 500000 &&
				c.RotaryPercent == 0.5 && c.RoPEScaling == 8 && c.QKNorm && c.QKVBias && !c.Bias && c.Untied
		}, "llama3_te_tp2_pp2", true, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join("testdata", "megatron", tc.name)
			m, global, info, err := ImportMegatron(dir, MegatronOptions{Vocab: tc.vocab})
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := m.GPTConfig()
			must(t, err)
			if info.TP != tc.tp || info.PP != tc.pp || info.DType != tc.dtype || info.PaddedVocab != 64 || !tc.arch(cfg) ||
				info.TransformerEngineKeys != tc.te || info.Legacy != tc.legacy || len(info.Warnings) > 0 {
				t.Errorf("imported %+v, config %+v", info, cfg)
			}
			ref := reference(t, filepath.Join("testdata", "megatron", tc.ref))
			logits, _ := modelLogits(t, m, global, ref, 1)
			requireClose(t, "logits", logits, ref["logits"])
			if !tc.hf {
				return
			}
			out := t.TempDir()
			if err := ExportHF(out, m, global); err != nil {
				t.Fatal(err)
			}
			m2, global2, err := ImportHF(out)
			if err != nil {
				t.Fatal(err)
			}
			if err := m2.Compatible(m); err != nil {
				t.Error(err)
			}
			logits, _ = modelLogits(t, m2, global2, ref, 2)
			requireClose(t, "logits through Hugging Face", logits, ref["logits"])
		})
	}
}

// Broken Megatron checkpoints are refused with a clear error.
func TestMegatronRejects(t *testing.T) {
	src := filepath.Join("testdata", "megatron", "gpt2_tp2")
	for _, tc := range []struct {
		name   string
		mutate func(t *testing.T, dir string)
		want   string
	}{
		{"missing rank", func(t *testing.T, dir string) {
			must(t, os.RemoveAll(filepath.Join(dir, "iter_0000007", "mp_rank_01")))
		}, "has 1 rank directories, its arguments say TP=2 × PP=1"},
		{"truncated file", func(t *testing.T, dir string) {
			p := filepath.Join(dir, "iter_0000007", "mp_rank_01", "model_optim_rng.pt")
			b := readFile(t, p)
			must(t, os.WriteFile(p, b[:len(b)/2], 0o644))
		}, "not a PyTorch zip archive"},
		{"not a zip", func(t *testing.T, dir string) {
			must(t, os.WriteFile(filepath.Join(dir, "iter_0000007", "mp_rank_00", "model_optim_rng.pt"), []byte("PK\x03\x04nonsense"), 0o644))
		}, "not a PyTorch zip archive"},
		{"no tracker", func(t *testing.T, dir string) {
			must(t, os.Remove(filepath.Join(dir, TrackerFile)))
		}, "not a Megatron checkpoint directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			copyDir(t, src, dir)
			tc.mutate(t, dir)
			_, _, _, err := ImportMegatron(dir, MegatronOptions{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
	if _, _, _, err := ImportMegatron(src, MegatronOptions{Vocab: 65}); err == nil || !strings.Contains(err.Error(), "vocabulary 65 of padded 64") {
		t.Errorf("a vocabulary above the padded size: %v", err)
	}
}

// torchSeeds returns the bytes of testdata's torch.save files.
func torchSeeds(t testing.TB) [][]byte {
	var out [][]byte
	_ = filepath.WalkDir(filepath.Join("testdata", "megatron"), func(path string, d os.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(path, ".pt") {
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, b)
		}
		return nil
	})
	if len(out) == 0 {
		t.Fatal("no .pt files in testdata/megatron")
	}
	return out
}

// FuzzTorchZip feeds arbitrary bytes to the torch.save reader (zip, pickle, storages,
// tensors): it must return an error or a value, never panic or allocate past its input.
func FuzzTorchZip(f *testing.F) {
	for _, b := range torchSeeds(f)[:2] {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = readTorchZip(bytes.NewReader(b), int64(len(b)))
	})
}

// FuzzPickle feeds arbitrary bytes to the pickle path alone (the checkpoints' data.pkl
// records as seeds; storages come from a stub that checks the sizes asked for).
func FuzzPickle(f *testing.F) {
	for _, b := range torchSeeds(f) {
		zr, err := zipReader(b)
		if err != nil {
			f.Fatal(err)
		}
		for _, r := range zr {
			if strings.HasSuffix(r.Name, "/data.pkl") {
				pkl, err := readRecord(r, maxPickle)
				if err != nil {
					f.Fatal(err)
				}
				f.Add(pkl)
			}
		}
	}
	f.Add([]byte("\x80\x02}q\x00X\x01\x00\x00\x00aq\x01K\x01s."))
	f.Fuzz(func(t *testing.T, pkl []byte) {
		_, _ = unpickle(pkl, func(key string, numel, elem int) ([]byte, error) {
			if numel < 0 || numel > 1<<16 {
				return nil, os.ErrInvalid
			}
			return make([]byte, numel*elem), nil
		})
	})
}

// zipReader returns the records of a zip archive held in memory.
func zipReader(b []byte) ([]*zip.File, error) {
	zr, err := zip.NewReader(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		return nil, err
	}
	return zr.File, nil
}
