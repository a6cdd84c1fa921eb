package checkpoint

import (
	"context"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"megago/nn"
	"megago/parallel"
	"megago/tensor"
)

// moeLayouts are the ways the tiny MoE models run on two goroutine ranks: the TP and
// expert groups each rank's model gets.
var moeLayouts = []struct {
	name   string
	groups func(c parallel.Comm) (tp parallel.Comm, ex nn.ExpertGroups)
	edit   func(m *nn.MoEConfig)
}{
	{"TP=2 ETP=2", func(c parallel.Comm) (parallel.Comm, nn.ExpertGroups) {
		return c, nn.ExpertGroups{TP: c, TPEP: c}
	}, func(m *nn.MoEConfig) { m.ETP = 2 }},
	{"EP=2", func(c parallel.Comm) (parallel.Comm, nn.ExpertGroups) {
		return parallel.Self(), nn.ExpertGroups{EP: c, TPEP: c}
	}, func(m *nn.MoEConfig) { m.EP = 2 }},
	{"TP=2 EP=2 ETP=1", func(c parallel.Comm) (parallel.Comm, nn.ExpertGroups) {
		return c, nn.ExpertGroups{EP: c, TPEP: c}
	}, func(m *nn.MoEConfig) { m.EP, m.ETP = 2, 1 }},
}

// moeLogits builds the GPT of m on two goroutine ranks with the groups of layout, sets
// each rank's part of global (its experts' slices under EP, its hidden slices under
// ETP) with SetParams and returns rank 0's logits of the reference inputs [B, T, V].
func moeLogits(t *testing.T, m Model, global, ref map[string]*tensor.Tensor, layout int) []float64 {
	t.Helper()
	l := moeLayouts[layout]
	cfg, err := m.GPTConfig()
	must(t, err)
	l.edit(&cfg.MoE)
	var mu sync.Mutex
	var logits []float64
	err = parallel.RunLocal(2, func(c parallel.Comm) error {
		ctx := context.Background()
		dev := tensor.NewCPU()
		tp, ex := l.groups(c)
		b := &nn.Builder{Dev: dev, DType: tensor.F32, RNG: tensor.NewRNG(1), TP: tp, Experts: ex}
		model, err := nn.NewGPT(b, cfg, nn.Stage{})
		if err != nil {
			return err
		}
		if err := SetParams(model.Params(), m, global); err != nil {
			return err
		}
		out := model.Forward(nn.Eval(ctx), ref["input_ids"].To(dev), nil)
		full := parallel.GatherFromTP(ctx, tp, out.Detach())
		if c.Rank() == 0 {
			mu.Lock()
			logits = tensor.ToSlice[float64](full.Narrow(-1, 0, cfg.Vocab))
			mu.Unlock()
		}
		return nil
	})
	must(t, err)
	return logits
}

// The tiny Mixtral, Qwen2-MoE and Qwen3-MoE of testdata/hfmoe, imported, are megago
// models whose parameters are exactly the imported tensors, and give the logits of
// gen.py's PyTorch forward (written from transformers' MoE classes) at TP = 1, TP = 2
// (experts split in their hidden size), EP = 2 (each rank loads its experts' slices)
// and TP = 2 with EP = 2. TestImportHFMoE checks the names and the export.
func TestHuggingFaceMoELogits(t *testing.T) {
	for _, tc := range hfMoECases {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join("testdata", "hfmoe", tc.name)
			m, global, err := ImportHF(dir)
			must(t, err)
			conv, err := m.Converter()
			must(t, err)
			var names []string
			for _, p := range conv.(nn.Module).Params() {
				names = append(names, p.Name)
				if g, ok := global[p.Name]; !ok || !g.Shape().Equal(p.GlobalShape) {
					t.Errorf("parameter %s %v: imported %v", p.Name, p.GlobalShape, g)
				}
			}
			if len(names) != len(global) {
				imported := sortedKeys(global)
				slices.Sort(names)
				t.Errorf("the model has parameters\n%v\nthe import\n%v", names, imported)
			}
			ref := reference(t, dir)
			logits, _ := modelLogits(t, m, global, ref, 1)
			requireClose(t, "logits", logits, ref["logits"])
			for i, l := range moeLayouts {
				t.Run(l.name, func(t *testing.T) {
					requireClose(t, "logits", moeLogits(t, m, global, ref, i), ref["logits"])
				})
			}
		})
	}
}
