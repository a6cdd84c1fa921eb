package main

import (
	"context"
	"math"
	"path/filepath"
	"testing"

	"megago/checkpoint"
	"megago/nn"
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
