package main

import (
	"io"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"megago/nn"
	"megago/parallel"
	"megago/tensor"
)

// llamaFlags make tinyArgs' model Llama-style: RMSNorm, SwiGLU, RoPE, two query groups
// for four heads, an untied output layer and no biases.
var llamaFlags = []string{"--normalization", "RMSNorm", "--norm-epsilon", "1e-6", "--swiglu", "--ffn-hidden-size", "64",
	"--position-embedding-type", "rope", "--group-query-attention", "--num-query-groups", "2",
	"--untie-embeddings-and-output-weights", "--disable-bias-linear"}

// TestLlamaLayoutMatchesOneRank trains the Llama-style GPT from the command line at
// TP=2 × PP=2 × DP=2 on eight goroutine ranks and compares its losses with one rank's,
// within the tolerance of TestLayoutsMatchOneRank.
func TestLlamaLayoutMatchesOneRank(t *testing.T) {
	one, _ := runTiny(t, tinyArgs(t, llamaFlags...))
	got, out := runTiny(t, tinyArgs(t, append([]string{"--ranks", "8", "--tensor-model-parallel-size", "2",
		"--pipeline-model-parallel-size", "2"}, llamaFlags...)...))
	assert.InDeltaSlice(t, one.Losses, got.Losses, layoutTol, "training losses")
	t.Logf("largest training-loss difference to one rank: %.2g", maxDiff(one.Losses, got.Losses))
	assert.InDelta(t, one.ValidLoss, got.ValidLoss, layoutTol, "validation loss")
	assert.Contains(t, out, "generated from the prompt")
	assert.Contains(t, out, "model: GPT (RMSNorm, ε 1e-06, SwiGLU, RoPE θ 10000, 2 query groups, no biases, untied output layer)")
	assert.Less(t, mean(one.Losses[4:]), one.Losses[0]-0.1, "the Llama-style model learns")
	assert.Greater(t, maxDiff(reference(t).Losses, one.Losses), 10*layoutTol, "the flags change the model (GPT-2's losses differ)")
}

// modelOf parses args after tinyArgs' and builds the whole model they describe on one
// rank, returning its parameters' shapes by name.
func modelOf(t *testing.T, args ...string) (*nn.GPT, map[string]tensor.Shape) {
	t.Helper()
	c, err := parseConfig(tinyArgs(t, args...), 0, io.Discard)
	require.NoError(t, err)
	b := &nn.Builder{Dev: tensor.NewCPU(), DType: tensor.F32, RNG: tensor.NewRNG(c.Seed), TP: parallel.Self()}
	m, err := nn.NewGPT(b, c.modelConfig(100), nn.Stage{})
	require.NoError(t, err)
	shapes := map[string]tensor.Shape{}
	for _, p := range m.Params() {
		shapes[p.Name] = p.Shape()
	}
	return m, shapes
}

// TestArchFlagsReachTheModel: each architecture flag changes the model it names, seen in
// its parameters (names and shapes) or its configuration.
func TestArchFlagsReachTheModel(t *testing.T) {
	const l0 = "layers.0."
	has := func(name string) func(*testing.T, *nn.GPT, map[string]tensor.Shape) {
		return func(t *testing.T, _ *nn.GPT, s map[string]tensor.Shape) { assert.Contains(t, s, name) }
	}
	lacks := func(name string) func(*testing.T, *nn.GPT, map[string]tensor.Shape) {
		return func(t *testing.T, _ *nn.GPT, s map[string]tensor.Shape) { assert.NotContains(t, s, name) }
	}
	shape := func(name string, want ...int) func(*testing.T, *nn.GPT, map[string]tensor.Shape) {
		return func(t *testing.T, _ *nn.GPT, s map[string]tensor.Shape) {
			assert.Equal(t, tensor.Shape(want), s[name], name)
		}
	}
	config := func(check func(c nn.GPTConfig) bool) func(*testing.T, *nn.GPT, map[string]tensor.Shape) {
		return func(t *testing.T, m *nn.GPT, _ map[string]tensor.Shape) {
			assert.True(t, check(m.Config), "%+v", m.Config)
		}
	}
	for _, tc := range []struct {
		args  []string
		check func(*testing.T, *nn.GPT, map[string]tensor.Shape)
	}{
		{nil, has("final_norm.bias")}, // GPT-2 by default
		{nil, has("embedding.position.weight")},
		{nil, has(l0 + "attn.qkv.bias")},
		{nil, lacks("output.weight")},
		{[]string{"--normalization", "RMSNorm"}, lacks("final_norm.bias")},
		{[]string{"--norm-epsilon", "1e-6"}, func(t *testing.T, m *nn.GPT, _ map[string]tensor.Shape) { assert.Equal(t, 1e-6, m.FinalNorm.Eps) }},
		{[]string{"--swiglu"}, shape(l0+"mlp.gate.weight", 64, 32)}, // Megatron's ⌊(8/3·32)/64⌋·64
		{[]string{"--swiglu", "--ffn-hidden-size", "48"}, shape(l0+"mlp.gate.weight", 48, 32)},
		{[]string{"--position-embedding-type", "rope"}, lacks("embedding.position.weight")},
		{[]string{"--position-embedding-type", "rope"}, config(func(c nn.GPTConfig) bool { return c.Position == nn.RoPE && c.RoPETheta == 10000 })},
		{[]string{"--position-embedding-type", "none"}, config(func(c nn.GPTConfig) bool { return c.Position == nn.NoPositions })},
		{[]string{"--position-embedding-type", "rope", "--rotary-base", "500000"}, config(func(c nn.GPTConfig) bool { return c.RoPETheta == 500000 })},
		{[]string{"--position-embedding-type", "rope", "--rotary-percent", "0.5"}, config(func(c nn.GPTConfig) bool { return c.RotaryPercent == 0.5 })},
		{[]string{"--position-embedding-type", "rope", "--use-rope-scaling"}, config(func(c nn.GPTConfig) bool { return c.RoPEScaling == 8 })},
		{[]string{"--position-embedding-type", "rope", "--use-rope-scaling", "--rope-scaling-factor", "32"}, config(func(c nn.GPTConfig) bool { return c.RoPEScaling == 32 })},
		{[]string{"--rope-scaling-factor", "32"}, config(func(c nn.GPTConfig) bool { return c.RoPEScaling == 0 })}, // ignored without --use-rope-scaling, as in Megatron
		// Two groups of two query heads, one key and one value head each, 8 channels a head.
		{[]string{"--group-query-attention", "--num-query-groups", "2"}, shape(l0+"attn.qkv.weight", 2*4*8, 32)},
		{[]string{"--group-query-attention"}, shape(l0+"attn.qkv.weight", 3*32, 32)}, // groups default to the heads
		{[]string{"--kv-channels", "16"}, shape(l0+"attn.proj.weight", 32, 4*16)},
		{[]string{"--hidden-size", "30", "--kv-channels", "8"}, shape(l0+"attn.qkv.weight", 3*4*8, 30)}, // heads need not divide the hidden size
		{[]string{"--disable-bias-linear"}, lacks(l0 + "attn.qkv.bias")},
		{[]string{"--disable-bias-linear"}, lacks(l0 + "mlp.fc1.bias")},
		{[]string{"--disable-bias-linear", "--add-qkv-bias"}, shape(l0+"attn.qkv.bias", 3*32)},
		{[]string{"--disable-bias-linear", "--add-qkv-bias"}, lacks(l0 + "attn.proj.bias")},
		{[]string{"--qk-layernorm"}, shape(l0+"attn.q_norm.weight", 8)},
		{[]string{"--qk-layernorm", "--normalization", "RMSNorm"}, lacks(l0 + "attn.k_norm.bias")},
		{[]string{"--untie-embeddings-and-output-weights"}, has("output.weight")},
		{[]string{"--init-method-std", "0.5"}, func(t *testing.T, m *nn.GPT, _ map[string]tensor.Shape) {
			w := tensor.ToSlice[float64](m.Word.Weight.Tensor)
			ss := 0.0
			for _, v := range w {
				ss += v * v
			}
			assert.InDelta(t, 0.5, math.Sqrt(ss/float64(len(w))), 0.02, "std of the word embedding")
		}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			m, shapes := modelOf(t, tc.args...)
			tc.check(t, m, shapes)
		})
	}
}

// TestArchFlagRefusals: impossible architecture flags stop the run before any work, in
// Megatron's words where it has them.
func TestArchFlagRefusals(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--normalization", "BatchNorm"}, `--normalization "BatchNorm": want LayerNorm or RMSNorm`},
		{[]string{"--norm-epsilon", "0"}, "--norm-epsilon 0 must be positive"},
		{[]string{"--position-embedding-type", "alibi"}, `--position-embedding-type "alibi"`},
		{[]string{"--position-embedding-type", "yarn"}, "yarn is not implemented"},
		{[]string{"--rotary-percent", "0.5"}, "--rotary-percent 0.5 needs --position-embedding-type rope"},
		{[]string{"--position-embedding-type", "rope", "--rotary-percent", "1.5"}, "--rotary-percent 1.5 must be in (0, 1]"},
		{[]string{"--position-embedding-type", "rope", "--rotary-percent", "0.2"}, "RotaryPercent = 0.2 rotates 1 of HeadSize = 8"},
		{[]string{"--use-rope-scaling"}, "--use-rope-scaling needs --position-embedding-type rope"},
		{[]string{"--num-query-groups", "2"}, "--num-query-groups 2 needs --group-query-attention"},
		{[]string{"--group-query-attention", "--num-query-groups", "3"}, "--num-attention-heads 4 is not divisible by --num-query-groups 3"},
		{[]string{"--ranks", "4", "--tensor-model-parallel-size", "4", "--group-query-attention", "--num-query-groups", "2"},
			"num_query_groups (2) must be a multiple of tensor_model_parallel_size (4)"},
		{[]string{"--rotary-base", "0"}, "--rotary-base 0 must be ≥ 1"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			_, err := parseConfig(tinyArgs(t, tc.args...), 0, io.Discard)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// TestUseCheckpointArgs: --use-checkpoint-args takes the Llama-style model of --load's
// checkpoint without its flags, and refuses a model flag that contradicts it.
func TestUseCheckpointArgs(t *testing.T) {
	dir := t.TempDir()
	saved, _ := runTiny(t, tinyArgs(t, append([]string{"--train-iters", "2", "--save", dir, "--gen-tokens", "0", "--eval-iters", "0"}, llamaFlags...)...))
	eval, out := runTiny(t, tinyArgs(t, "--load", dir, "--use-checkpoint-args", "--eval-only", "--eval-iters", "1"))
	assert.Contains(t, out, "model: GPT (RMSNorm, ε 1e-06, SwiGLU, RoPE θ 10000, 2 query groups, no biases, untied output layer)")
	assert.Less(t, eval.ValidLoss, saved.Losses[0], "the loaded model is the trained one")

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--load", dir, "--use-checkpoint-args", "--hidden-size", "64"}, "--hidden-size 64 differs from the checkpoint's 32"},
		{[]string{"--load", dir, "--use-checkpoint-args", "--normalization", "LayerNorm"}, "--normalization LayerNorm differs from the checkpoint's RMSNorm"},
		{[]string{"--use-checkpoint-args"}, "--use-checkpoint-args requires --load"},
	} {
		_, err := parseConfig(tinyArgs(t, tc.args...), 0, io.Discard)
		require.Error(t, err, tc.args)
		assert.Contains(t, err.Error(), tc.want)
	}
	_, err := parseConfig(tinyArgs(t, "--load", dir, "--use-checkpoint-args", "--norm-epsilon", "1e-6", "--swiglu"), 0, io.Discard)
	assert.NoError(t, err, "flags that agree with the checkpoint")
}
