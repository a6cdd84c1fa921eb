package checkpoint

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"megago/tensor"
)

// hfMoECases are the tiny checkpoints of testdata/hfmoe (written by gen.py there), with
// the Hugging Face names of their MoE blocks as the model classes name them.
var hfMoECases = []struct {
	name string
	// block is layer %d's MoE block; experts the gate, up and down projections of one
	// expert; moeLayers the layers with experts (the others have Llama's dense MLP).
	block     string
	experts   [3]string
	moeLayers []int
	shared    bool // Qwen2-MoE's shared expert and its gate
	qkNorm    bool // Qwen3's q_norm, k_norm
	maxShard  int64
}{
	{"mixtral", "model.layers.%d.block_sparse_moe.", [3]string{"w1", "w3", "w2"}, []int{0, 1}, false, false, 0},
	{"qwen2_moe", "model.layers.%d.mlp.", [3]string{"gate_proj", "up_proj", "down_proj"}, []int{0, 2}, true, false, 40 << 10},
	{"qwen3_moe", "model.layers.%d.mlp.", [3]string{"gate_proj", "up_proj", "down_proj"}, []int{1}, false, true, 0},
}

// megagoExperts are megago's stacked expert tensors of layer %d, in the order of
// hfMoECases' experts.
var megagoExperts = [3]string{"layers.%d.mlp.experts.gate.weight", "layers.%d.mlp.experts.fc1.weight", "layers.%d.mlp.experts.fc2.weight"}

// requireSameBytes checks that megago's tensor name (or its slice j of dim 0 when j ≥ 0)
// holds the Hugging Face tensor h, in shape and bytes.
func requireSameBytes(t *testing.T, global, hf map[string]*tensor.Tensor, name string, j int, h string) {
	t.Helper()
	g, ok := global[name]
	w, okh := hf[h]
	if !ok || !okh {
		t.Errorf("%s (%v) or %s (%v) missing", name, ok, h, okh)
		return
	}
	if j >= 0 {
		g = g.Detach().Narrow(0, j, 1).Squeeze(0)
	}
	if !g.Shape().Equal(w.Shape()) || !bytes.Equal(tensorBytes(g), tensorBytes(w)) {
		t.Errorf("%s[%d] %v differs from %s %v", name, j, g.Shape(), h, w.Shape())
	}
}

// The tiny Mixtral, Qwen2-MoE (sharded, with an index) and Qwen3-MoE import under
// megago's names: each expert tensor is the stack of the experts' tensors, the router,
// shared expert, its gate and the query/key norms are copies, the layers without experts
// keep the dense MLP; every Hugging Face element lands once. They export back to the same
// tensors byte for byte (the single files to the same file), and the export imports to
// the same model.
func TestImportHFMoE(t *testing.T) {
	for _, tc := range hfMoECases {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join("testdata", "hfmoe", tc.name)
			_, hf, err := ReadHF(dir)
			must(t, err)
			m, global, err := ImportHF(dir)
			must(t, err)
			c, err := m.GPTConfig()
			must(t, err)
			E := c.MoE.NumExperts
			for i := range c.NumLayers {
				block, l := fmt.Sprintf(tc.block, i), fmt.Sprintf("layers.%d.", i)
				if tc.qkNorm {
					requireSameBytes(t, global, hf, l+"attn.q_norm.weight", -1, fmt.Sprintf("model.layers.%d.self_attn.q_norm.weight", i))
					requireSameBytes(t, global, hf, l+"attn.k_norm.weight", -1, fmt.Sprintf("model.layers.%d.self_attn.k_norm.weight", i))
				}
				moe := false
				for _, j := range tc.moeLayers {
					moe = moe || i == j
				}
				if !moe {
					requireSameBytes(t, global, hf, l+"mlp.fc1.weight", -1, fmt.Sprintf("model.layers.%d.mlp.up_proj.weight", i))
					if _, ok := global[l+"mlp.router.weight"]; ok {
						t.Errorf("dense layer %d has a router", i)
					}
					continue
				}
				if _, ok := global[l+"mlp.fc1.weight"]; ok {
					t.Errorf("MoE layer %d has a dense MLP", i)
				}
				requireSameBytes(t, global, hf, l+"mlp.router.weight", -1, block+"gate.weight")
				for k, name := range megagoExperts {
					if g := global[fmt.Sprintf(name, i)]; g == nil || g.Dim(0) != E {
						t.Fatalf("%s: %v, want %d experts in dim 0", fmt.Sprintf(name, i), g, E)
					}
					for j := range E {
						requireSameBytes(t, global, hf, fmt.Sprintf(name, i), j, fmt.Sprintf("%sexperts.%d.%s.weight", block, j, tc.experts[k]))
					}
				}
				if tc.shared {
					for k, n := range []string{"gate", "fc1", "fc2"} {
						requireSameBytes(t, global, hf, l+"mlp.shared_expert."+n+".weight", -1, block+"shared_expert."+[]string{"gate_proj", "up_proj", "down_proj"}[k]+".weight")
					}
					requireSameBytes(t, global, hf, l+"mlp.shared_expert_gate.weight", -1, block+"shared_expert_gate.weight")
				}
			}
			padding := int64(0)
			for _, name := range []string{"embedding.word.weight", "output.weight"} {
				if g, ok := global[name]; ok {
					padding += int64((g.Dim(0) - c.Vocab) * g.Dim(1))
				}
			}
			if got, want := elementsOf(global)-padding, elementsOf(hf); got != want {
				t.Errorf("%d elements imported (without the vocabulary padding), the files have %d", got, want)
			}

			out := t.TempDir()
			must(t, ExportHFWith(out, m, global, HFExportOptions{MaxShardSize: tc.maxShard}))
			_, back, err := ReadHF(out)
			must(t, err)
			if len(back) != len(hf) {
				t.Errorf("exported %d tensors, the original has %d", len(back), len(hf))
			}
			for name, w := range hf {
				if g, ok := back[name]; !ok || !g.Shape().Equal(w.Shape()) || !bytes.Equal(tensorBytes(g), tensorBytes(w)) {
					t.Errorf("exported %s differs from the original", name)
				}
			}
			if tc.maxShard == 0 && !bytes.Equal(readFile(t, filepath.Join(out, hfWeightsFile)), readFile(t, filepath.Join(dir, hfWeightsFile))) {
				t.Errorf("the exported %s differs from the original file", hfWeightsFile)
			}
			m2, _, err := ImportHF(out)
			must(t, err)
			if !bytes.Equal(m2.Config, m.Config) {
				t.Errorf("the export imports to\n%s\nwant\n%s", m2.Config, m.Config)
			}
		})
	}
}

// Experts that cannot be stacked (different shapes) or are missing are errors naming the
// tensor, not panics.
func TestImportHFMoEBadExperts(t *testing.T) {
	src := filepath.Join("testdata", "hfmoe", "mixtral")
	const w1 = "model.layers.1.block_sparse_moe.experts.2.w1.weight"
	for _, tc := range []struct {
		name string
		edit func(hf map[string]*tensor.Tensor)
		want string
	}{
		{"shape", func(hf map[string]*tensor.Tensor) { hf[w1] = hf[w1].Narrow(0, 0, 31) },
			w1 + " is float32 [31 24], but model.layers.1.block_sparse_moe.experts.0.w1.weight is float32 [32 24]"},
		{"missing", func(hf map[string]*tensor.Tensor) { delete(hf, w1) }, fmt.Sprintf("no tensor %q", w1)},
	} {
		dir := t.TempDir()
		copyDir(t, src, dir)
		hf, _, err := ReadSafetensors(filepath.Join(src, hfWeightsFile))
		must(t, err)
		tc.edit(hf)
		must(t, WriteSafetensors(filepath.Join(dir, hfWeightsFile), hf, nil))
		if _, _, err := ImportHF(dir); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		}
	}
}

// The tiny dense Qwen3 of testdata/hfmoe (qwen3_moe's attention: q_norm and k_norm,
// head_dim 8 ≠ hidden/heads, tied embeddings) gives the logits of gen.py's PyTorch
// forward at TP = 1 and TP = 2, and exports back to the same file byte for byte.
func TestHuggingFaceQwen3(t *testing.T) {
	dir := filepath.Join("testdata", "hfmoe", "qwen3")
	m, global, err := ImportHF(dir)
	must(t, err)
	ref := reference(t, dir)
	for _, tp := range []int{1, 2} {
		logits, _ := modelLogits(t, m, global, ref, tp)
		requireClose(t, fmt.Sprintf("TP %d logits", tp), logits, ref["logits"])
	}
	out := t.TempDir()
	must(t, ExportHF(out, m, global))
	if !bytes.Equal(readFile(t, filepath.Join(out, hfWeightsFile)), readFile(t, filepath.Join(dir, hfWeightsFile))) {
		t.Errorf("the exported %s differs from the original file", hfWeightsFile)
	}
}
