package main

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"testing"

	"megago/checkpoint"
	"megago/nn"
	"megago/serve"
	"megago/tensor"
)

// megago serve --from hf loads the tiny Mixtral and Qwen2-MoE of
// checkpoint/testdata/hfmoe at TP 1 and 2; at TP 1 the served model gives the logits
// of the checkpoint's PyTorch reference (gen.py there).
func TestServeLoadsHFMoE(t *testing.T) {
	for _, name := range []string{"mixtral", "qwen2_moe"} {
		src := filepath.Join(checkpointTestdata, "hfmoe", name)
		ref, _, err := checkpoint.ReadSafetensors(filepath.Join(src, "reference.safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		for _, tp := range []int{1, 2} {
			c := &serveFlags{load: src, from: "hf", tp: tp, device: "cpu", maxSeqLen: 32}
			ms, err := loadServeModels(c)
			if err != nil {
				t.Fatalf("%s, TP %d: %v", name, tp, err)
			}
			if ms.cfg.MoE.NumExperts != 4 {
				t.Errorf("%s: served a model with %d experts, want 4", name, ms.cfg.MoE.NumExperts)
			}
			if tp == 1 {
				m := ms.models[0]
				out := m.Forward(nn.Eval(context.Background()), ref["input_ids"].To(ms.devs[0]), nil) // [B, T, Vp]
				got := tensor.ToSlice[float64](out.Detach().Narrow(-1, 0, ms.cfg.Vocab))
				want := tensor.ToSlice[float64](ref["logits"])
				scale := 0.0
				for _, v := range want {
					scale = max(scale, math.Abs(v))
				}
				for i := range want {
					// PyTorch sums in another order: 10⁻⁵ of the largest logit.
					if math.Abs(got[i]-want[i]) > 1e-5*(math.Abs(want[i])+scale) {
						t.Errorf("%s: logit %d = %v, PyTorch's %v", name, i, got[i], want[i])
						break
					}
				}
			}
			ms.close()
		}
	}
}

// moeLayouts are the layouts MoE models are served at: TP 1, TP 2 with each expert split
// over both ranks (expert-TP = TP, the default), and TP 2 with two experts on each rank
// (EP 2, expert-TP 1).
var moeLayouts = []struct{ tp, ep, etp int }{{1, 1, 0}, {2, 1, 0}, {2, 2, 1}}

// TestServeMoEGenerates serves MoE models — the tiny Mixtral and Qwen2-MoE (--from hf)
// and a megago checkpoint at TP 2 of the Mixtral with a sigmoid router and expert biases
// (--from megago) — at each of moeLayouts: the engine's greedy tokens for prompts of
// several lengths (prefill chunks and decode steps of one token) are nn.Generate's on
// the TP 1 model, and the served routers hold the checkpoint's expert biases.
func TestServeMoEGenerates(t *testing.T) {
	biased := biasedMoECheckpoint(t)
	prompts := [][]int32{{5, 9, 2}, {11}, {3, 14, 15, 9, 26, 5, 35}}
	const newTokens = 5
	for _, src := range []struct{ name, load, from string }{
		{"mixtral", filepath.Join(checkpointTestdata, "hfmoe", "mixtral"), "hf"},
		{"qwen2_moe", filepath.Join(checkpointTestdata, "hfmoe", "qwen2_moe"), "hf"},
		{"megago with expert bias", biased, "megago"},
	} {
		var want [][]int32
		for _, l := range moeLayouts {
			c := &serveFlags{load: src.load, from: src.from, tp: l.tp, ep: l.ep, etp: l.etp, device: "cpu", maxSeqLen: 32,
				maxRequests: 2}
			ms, err := loadServeModels(c)
			if err != nil {
				t.Fatalf("%s at %+v: %v", src.name, l, err)
			}
			if l.tp == 1 {
				if want, err = nn.Generate(context.Background(), ms.models[0], prompts, nn.GenerateOptions{MaxNewTokens: newTokens}); err != nil {
					t.Fatal(err)
				}
			}
			checkExpertBias(t, src.name, ms, src.load, src.from)
			e, f := ms.cfg.MoE.NumExperts, cmp.Or(ms.cfg.MoE.FFNHidden, ms.cfg.FFNHidden)
			if w := ms.models[0].Block.Layers[0].MoE.Experts.FC1.Tensor; w.Dim(0) != e/l.ep || w.Dim(1) != f/cmp.Or(l.etp, l.tp) {
				t.Errorf("%s at %+v: rank 0 holds experts %v, want %d of hidden %d", src.name, l, w.Shape(), e/l.ep, f/cmp.Or(l.etp, l.tp))
			}
			got := engineTokens(t, ms, c, prompts, newTokens)
			for i := range prompts {
				if !slices.Equal(got[i], want[i]) {
					t.Errorf("%s at TP %d, EP %d, expert-TP %d: prompt %d gives %v, nn.Generate at TP 1 %v", src.name, l.tp, l.ep, l.etp, i, got[i], want[i])
				}
			}
			ms.close()
		}
	}
	c := &serveFlags{load: biased, tp: 3, ep: 3, etp: 1, device: "cpu", maxSeqLen: 32}
	if _, err := loadServeModels(c); err == nil || err.Error() != "--expert-model-parallel-size 3 does not divide the model's 4 experts" {
		t.Errorf("EP 3 of 4 experts: %v", err)
	}
}

// engineTokens returns the greedy tokens serve's engine generates after each prompt on
// the models ms.
func engineTokens(t *testing.T, ms *serveModels, c *serveFlags, prompts [][]int32, n int) [][]int32 {
	t.Helper()
	e, err := serve.NewEngine(ms.models, c.engineConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	chans := make([]<-chan serve.Event, len(prompts))
	for i, p := range prompts {
		if chans[i], err = e.Submit(context.Background(), serve.Request{Prompt: p, MaxNewTokens: n}); err != nil {
			t.Fatal(err)
		}
	}
	out := make([][]int32, len(prompts))
	for i, ch := range chans {
		for ev := range ch {
			if ev.Err != nil {
				t.Fatalf("prompt %d: %v", i, ev.Err)
			}
			if ev.Token != nil {
				out[i] = append(out[i], ev.Token.ID)
			}
		}
	}
	return out
}

// biasedMoECheckpoint writes the tiny Mixtral as a megago checkpoint at TP 2 with a
// sigmoid router and expert biases that change which experts are chosen, and returns
// its directory.
func biasedMoECheckpoint(t *testing.T) string {
	t.Helper()
	m, global, err := checkpoint.ImportHF(filepath.Join(checkpointTestdata, "hfmoe", "mixtral"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := m.GPTConfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg.MoE.ScoreFunction, cfg.MoE.EnableExpertBias = "sigmoid", true
	for i := range cfg.NumLayers {
		bias := []float32{0.5, -0.5, 0.25, -0.25} // about the spread of the tiny model's scores
		if i%2 == 1 {
			slices.Reverse(bias)
		}
		global[fmt.Sprintf("layers.%d.mlp.router.expert_bias", i)] = tensor.FromSlice(tensor.NewCPU(), bias)
	}
	dir := t.TempDir()
	if _, err := checkpoint.WriteGlobal(context.Background(), dir, checkpoint.GPTModel(cfg), global, 0, 0, checkpoint.WriteOptions{TP: 2}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// checkExpertBias checks that the routers of every served rank hold the expert biases
// of the checkpoint in load (none for a Hugging Face model).
func checkExpertBias(t *testing.T, name string, ms *serveModels, load, from string) {
	t.Helper()
	var global map[string]*tensor.Tensor
	if from == "megago" {
		var err error
		if _, global, err = checkpoint.ReadGlobal(load, 0); err != nil {
			t.Fatal(err)
		}
	}
	for r, m := range ms.models {
		state := nn.ModuleState(m)
		if from == "megago" && len(state) != ms.cfg.NumLayers {
			t.Errorf("%s: rank %d holds %d expert biases, want one per layer", name, r, len(state))
		}
		for _, s := range state {
			want := global[s.Name]
			if want == nil || !tensor.AllClose(s.Tensor, want.To(s.Tensor.Device()), 0, 0) {
				t.Errorf("%s: rank %d: %s = %v, the checkpoint's %v", name, r, s.Name, tensor.ToSlice[float32](s.Tensor), want)
			}
		}
	}
}
