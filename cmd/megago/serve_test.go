package main

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"megago/checkpoint"
	"megago/tensor"
)

func TestServeCommandUsage(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no load", []string{"--tokenizer-type", "gpt2"}, "--load is required"},
		{"no tokenizer", []string{"--load", "x"}, "--tokenizer-type is required"},
		{"from", []string{"--load", "x", "--tokenizer-type", "gpt2", "--from", "onnx"}, `--from "onnx": want megago, hf or megatron`},
		{"sizes", []string{"--load", "x", "--tokenizer-type", "gpt2", "--tensor-model-parallel-size", "0", "--inference-max-requests", "0"},
			"--tensor-model-parallel-size 0: want ≥ 1; --inference-max-requests 0: want ≥ 1"},
		{"port", []string{"--load", "x", "--tokenizer-type", "gpt2", "--port", "70000"}, "--port 70000"},
		{"experts", []string{"--load", "x", "--tokenizer-type", "gpt2", "--tensor-model-parallel-size", "2", "--expert-model-parallel-size", "2"},
			"--expert-tensor-parallel-size 2 × --expert-model-parallel-size 2 must divide --tensor-model-parallel-size 2"},
		{"argument", []string{"--load", "x", "extra"}, `unexpected argument "extra"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := run(t, append([]string{"serve"}, tt.args...)...)
			var ue *usageError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("megago serve %v: %v, want a usage error with %q", tt.args, err, tt.want)
			}
		})
	}
	if _, _, err := run(t, "serve", "--load", t.TempDir(), "--tokenizer-type", "gpt2"); err == nil || !strings.Contains(err.Error(), "latest_checkpointed_iteration") {
		t.Errorf("megago serve of an empty directory: %v", err)
	}
}

// TestServeLoadsTPShards loads the Megatron test checkpoint as megago serve does, at TP 1
// and 2: every parameter holds the imported weights (TP 1) and the shards cover them.
func TestServeLoadsTPShards(t *testing.T) {
	src := filepath.Join(checkpointTestdata, "megatron", "gpt2_tp2")
	_, global, _, err := checkpoint.ImportMegatron(src, checkpoint.MegatronOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tp := range []int{1, 2} {
		c := &serveFlags{load: src, from: "megatron", tp: tp, device: "cpu", maxSeqLen: 1 << 20}
		ms, err := loadServeModels(c)
		if err != nil {
			t.Fatalf("TP %d: %v", tp, err)
		}
		if c.maxSeqLen != ms.cfg.MaxPosition {
			t.Errorf("TP %d: --inference-max-seq-length not lowered to the %d learned positions: %d", tp, ms.cfg.MaxPosition, c.maxSeqLen)
		}
		numel := map[string]int{}
		for _, m := range ms.models {
			for _, p := range m.Params() {
				numel[p.Name] += p.Numel()
				if g := global[p.Name]; tp == 1 && g != nil && !tensor.AllClose(p.Tensor, g.To(p.Tensor.Device()), 0, 0) {
					t.Errorf("TP 1: %s differs from the checkpoint", p.Name)
				}
			}
		}
		checked := 0
		for name, n := range numel {
			if global[name] != nil {
				checked++
			}
			if g := global[name]; g != nil && !strings.Contains(name, "embedding.word") && !strings.Contains(name, "output") && n != g.Numel()*tpReplicas(name, tp) {
				t.Errorf("TP %d: %s: %d elements over the ranks, the checkpoint has %d", tp, name, n, g.Numel())
			}
		}
		if checked < len(numel)-1 {
			t.Errorf("TP %d: only %d of the model's %d parameters are in the checkpoint", tp, checked, len(numel))
		}
		ms.close()
	}
	c := &serveFlags{load: src, from: "megatron", tp: 1, device: "cpu", maxSeqLen: 1 << 20, seqLenExplicit: true}
	if _, err := loadServeModels(c); err == nil || !strings.Contains(err.Error(), "learned positions") {
		t.Errorf("an explicit --inference-max-seq-length beyond the positions: %v", err)
	}
}

// tpReplicas returns how many TP ranks hold a whole copy of the parameter name: the
// norms, position embeddings and row-parallel biases are replicated, the rest split.
func tpReplicas(name string, tp int) int {
	for _, s := range []string{"norm", "position", "proj.bias", "fc2.bias", "out.bias"} {
		if strings.Contains(name, s) {
			return tp
		}
	}
	return 1
}
