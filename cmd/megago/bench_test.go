package main

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"megago/tensor"
)

// TestBenchGPT runs a tiny megago bench gpt and checks its JSON line against
// bench/torch_gpt.py's field names and the model-FLOP formula of BENCHMARKS.md.
func TestBenchGPT(t *testing.T) {
	stdout, stderr, err := run(t, "bench", "gpt", "--layers", "2", "--dim", "16", "--heads", "2", "--vocab", "50",
		"--seq", "8", "--batch", "2", "--steps", "3", "--warmup", "1", "--pad-vocab", "64", "--lr", "1e-2")
	if err != nil {
		t.Fatalf("megago bench gpt: %v\n%s", err, stderr)
	}
	var res map[string]any
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatalf("output is not one JSON object: %v\n%s", err, stdout)
	}
	// The fields of torch_gpt.py's line that do not name PyTorch itself.
	for _, k := range []string{"system", "threads", "layers", "dim", "heads", "vocab", "vocab_padded", "block",
		"seq", "batch", "tokens_per_step", "params", "params_matmul", "steps", "warmup", "ms_step_median",
		"ms_step_min", "ms_step_max", "ms_fwd_median", "ms_bwd_median", "ms_update_median", "tokens_per_s",
		"model_gflop_per_step", "gflops", "first_loss", "last_loss"} {
		if _, ok := res[k]; !ok {
			t.Errorf("JSON has no field %q", k)
		}
	}
	// L=2, C=16, Vp=64, T=8, 16 tokens: N = 12·2·16² + 64·16 = 7168 weights in matrix
	// multiplies; FLOPs = 16·(6·7168 + 12·2·8·16) = 737,280.
	want := map[string]float64{"vocab_padded": 64, "params_matmul": 7168, "tokens_per_step": 16, "block": 8,
		"model_gflop_per_step": 0.001} // 737,280 rounded to 3 decimals of a GFLOP
	for k, v := range want {
		if res[k] != v {
			t.Errorf("%s = %v, want %v", k, res[k], v)
		}
	}
	// GPT-2's params: wte 64·16 + wpe 8·16 + 2 layers·(12C²+13C) + final norm 2C.
	if got, want := res["params"], float64(64*16+8*16+2*(12*16*16+13*16)+2*16); got != want {
		t.Errorf("params = %v, want %v", got, want)
	}
	// At initialization (std 0.02) the logits are near zero: the loss is about ln 50.
	if l := res["first_loss"].(float64); math.Abs(l-math.Log(50)) > 0.05 {
		t.Errorf("first loss %v, want about ln 50 = %.4f", l, math.Log(50))
	}
	if n := strings.Count(stderr, "\n"); n != 4 {
		t.Errorf("progress has %d lines, want one per step (4):\n%s", n, stderr)
	}
	for _, k := range []string{"ms_step_median", "tokens_per_s", "gflops", "peak_rss_mb"} {
		if v, _ := res[k].(float64); !(v > 0) {
			t.Errorf("%s = %v, want > 0", k, res[k])
		}
	}
}

// TestBenchLlamaStyle: Megatron's architecture flags reach the benchmarked model, seen in
// its parameter count.
func TestBenchLlamaStyle(t *testing.T) {
	stdout, stderr, err := run(t, "bench", "gpt", "--layers", "2", "--dim", "16", "--heads", "2", "--vocab", "50",
		"--seq", "8", "--batch", "2", "--steps", "1", "--warmup", "0", "--pad-vocab", "64",
		"--normalization", "RMSNorm", "--swiglu", "--ffn-hidden-size", "24", "--position-embedding-type", "rope",
		"--group-query-attention", "--num-query-groups", "1", "--untie-embeddings-and-output-weights", "--disable-bias-linear")
	if err != nil {
		t.Fatalf("megago bench gpt: %v\n%s", err, stderr)
	}
	var res map[string]any
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatalf("output is not one JSON object: %v\n%s", err, stdout)
	}
	// Word embedding and untied output 2·Vp·C, no position table; per layer QKV of one
	// group (2 query heads, a key and a value head of 8) 32·C, output projection C·C,
	// gate, up and down projections 3·24·C, two RMSNorm weights; the final RMSNorm; no biases.
	want := 2*64*16 + 2*(32*16+16*16+3*24*16+2*16) + 16
	if got := res["params"]; got != float64(want) {
		t.Errorf("params = %v, want %v", got, want)
	}
}

func TestBenchUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"bench"},
		{"bench", "bert"},
		{"bench", "gpt", "--dim", "10", "--heads", "3"},
		{"bench", "gpt", "--seq", "16", "--block", "8"},
		{"bench", "gpt", "--steps", "0"},
		{"bench", "gpt", "--heads", "12", "--group-query-attention", "--num-query-groups", "5"},
		{"bench", "gpt", "--normalization", "rmsnorm"},
		{"bench", "gpt", "--num-experts", "8", "--expert-model-parallel-size", "2"}, // one rank
		{"bench", "gpt", "--moe-router-topk", "4"},                                  // no --num-experts
		{"bench", "gpt", "--num-experts", "4", "--moe-layer-freq", "[1]*3"},         // 12 layers
	} {
		if _, _, err := run(t, args...); err == nil {
			t.Errorf("megago %s succeeded, want an error", strings.Join(args, " "))
		}
	}
}

// TestBenchContextParallel: bench gpt takes Megatron's context-parallel flags at size 1
// (Megatron's scripts pass them) and refuses a sequence the CP size does not split.
func TestBenchContextParallel(t *testing.T) {
	tiny := []string{"bench", "gpt", "--layers", "1", "--dim", "8", "--heads", "2", "--vocab", "16", "--seq", "4",
		"--batch", "1", "--steps", "1", "--warmup", "0"}
	for _, tc := range []struct {
		args []string
		want string // "" for success
	}{
		{[]string{"--context-parallel-size", "1", "--cp-comm-type", "p2p"}, ""},
		{[]string{"--context-parallel-size", "4"}, "is not divisible by 2 × --context-parallel-size 4"},
		{[]string{"--cp-comm-type", "a2a", "ring"}, `--cp-comm-type "ring"`},
	} {
		_, _, err := run(t, append(tiny, tc.args...)...)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("megago %v: %v", tc.args, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("megago %v: error %v, want one saying %q", tc.args, err, tc.want)
		}
	}
}

// TestBenchContextParallelLoss: bench gpt on CP goroutine ranks, for each comm type,
// trains to the losses of one rank (first and after two updates), on the same tokens.
func TestBenchContextParallelLoss(t *testing.T) {
	// float32: CP reorders the attention's sums (log-sum-exp combination, or the
	// all-to-all's heads) and the gradient's average over the group; the losses are
	// printed to 4 decimals, so they may differ in the last.
	const tol = 2e-4
	tiny := []string{"bench", "gpt", "--layers", "2", "--dim", "16", "--heads", "2", "--vocab", "50", "--seq", "16",
		"--batch", "2", "--steps", "2", "--warmup", "1", "--lr", "1e-2"}
	losses := func(t *testing.T, args ...string) map[string]any {
		t.Helper()
		stdout, stderr, err := run(t, append(tiny, args...)...)
		if err != nil {
			t.Fatalf("megago bench gpt %v: %v\n%s", args, err, stderr)
		}
		var res map[string]any
		if err := json.Unmarshal([]byte(stdout), &res); err != nil {
			t.Fatalf("output is not one JSON object: %v\n%s", err, stdout)
		}
		return res
	}
	want := losses(t)
	for _, args := range [][]string{
		{"--context-parallel-size", "2"},
		{"--context-parallel-size", "2", "--cp-comm-type", "all_gather"},
		{"--context-parallel-size", "4", "--cp-comm-type", "a2a+p2p", "--hierarchical-context-parallel-sizes", "2", "2"},
	} {
		got := losses(t, args...)
		if s := got["system"].(string); !strings.HasSuffix(s, "-cp"+args[1]) {
			t.Errorf("%v: system %q, want it to end in -cp%s", args, s, args[1])
		}
		for _, k := range []string{"first_loss", "last_loss"} {
			if g, w := got[k].(float64), want[k].(float64); math.Abs(g-w) > tol {
				t.Errorf("%v: %s %v, want CP=1's %v", args, k, g, w)
			}
		}
	}
}

// Without a GPU, --device cuda fails with an error, not a crash, in at most three lines
// that name the driver library looked for.
func TestBenchNoGPU(t *testing.T) {
	if _, err := tensor.Open("cuda"); err == nil {
		t.Skip("a GPU is present: this test checks the error on machines without one")
	}
	_, _, err := run(t, "bench", "gpt", "--device", "cuda", "--layers", "1", "--dim", "8", "--heads", "2",
		"--vocab", "16", "--seq", "4", "--batch", "1", "--steps", "1")
	if err == nil || !strings.Contains(err.Error(), "libcuda") {
		t.Fatalf("megago bench gpt --device cuda on a machine without a GPU: %v, want an error naming libcuda", err)
	}
	if n := strings.Count(err.Error(), "\n") + 1; n > 3 {
		t.Errorf("the error has %d lines, want at most 3:\n%v", n, err)
	}
	t.Log(err)
}
