package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"megago/nn"
)

// TestMoEFlags: Megatron's MoE flags, on the command line or in a --config file (with
// Megatron's underscores), reach the model's nn.MoEConfig.
func TestMoEFlags(t *testing.T) {
	file := filepath.Join(t.TempDir(), "moe.json")
	require.NoError(t, os.WriteFile(file, []byte(`{"num_experts": 4, "moe_layer_freq": "([1]*1+[0]*1)*2",
		"moe_router_topk": 1, "moe_router_pre_softmax": true, "moe_z_loss_coeff": 1e-3}`), 0o644))
	list := filepath.Join(t.TempDir(), "list.json")
	require.NoError(t, os.WriteFile(list, []byte(`{"num_experts": 2, "moe_layer_freq": [0, 1, 1, 1]}`), 0o644))
	for _, tc := range []struct {
		args []string
		want nn.MoEConfig
	}{
		{[]string{"--num-experts", "8", "--moe-router-topk", "2", "--moe-grouped-gemm", "--moe-aux-loss-coeff", "1e-2"},
			nn.MoEConfig{NumExperts: 8, TopK: 2, GroupedGEMM: true, AuxLossCoeff: 1e-2, EP: 1}},
		{[]string{"--config", file}, nn.MoEConfig{NumExperts: 4, LayerPattern: "1,0,1,0", TopK: 1, PreSoftmax: true, ZLossCoeff: 1e-3, EP: 1}},
		{[]string{"--config", list}, nn.MoEConfig{NumExperts: 2, LayerPattern: "0,1,1,1", TopK: 2, EP: 1}},
		{[]string{"--ranks", "4", "--tensor-model-parallel-size", "2", "--sequence-parallel", "--num-experts", "4",
			"--expert-model-parallel-size", "2", "--moe-token-dispatcher-type", "alltoall", "--moe-ffn-hidden-size", "64"},
			nn.MoEConfig{NumExperts: 4, TopK: 2, EP: 2, Dispatcher: "alltoall", FFNHidden: 64}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			c, err := parseConfig(tinyArgs(t, tc.args...), 0, io.Discard)
			require.NoError(t, err)
			assert.Equal(t, tc.want, c.modelConfig(100).MoE)
		})
	}
}

// TestMoEFlagRefusals: MoE settings that cannot work stop the run before any work, each
// with a message naming its flags.
func TestMoEFlagRefusals(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--num-experts", "4", "--moe-layer-freq", "[1,0,1]"}, `--moe-layer-freq "[1,0,1]" has 3 layers, --num-layers 4`},
		{[]string{"--num-experts", "4", "--moe-layer-freq", "[1,0]*2+x"}, `--moe-layer-freq "[1,0]*2+x": at offset 8: unexpected "x"`},
		{[]string{"--num-experts", "6", "--expert-model-parallel-size", "4"}, "--num-experts 6 is not divisible by --expert-model-parallel-size 4"},
		{[]string{"--moe-aux-loss-coeff", "1e-2"}, "--moe-aux-loss-coeff 0.01: mixture-of-experts flags need --num-experts"},
		{[]string{"--num-experts", "4", "--expert-model-parallel-size", "4", "--ranks", "2"},
			"expert-tensor-parallel size 1 × --expert-model-parallel-size 4 does not divide the 2 ranks of each pipeline stage"},
		{[]string{"--num-experts", "4", "--moe-router-topk", "8"}, "--moe-router-topk 8 must be between 1 and --num-experts 4"},
		{[]string{"--num-experts", "4", "--moe-router-load-balancing-type", "sinkhorn"}, "sinkhorn is not implemented"},
		{[]string{"--num-experts", "4", "--moe-pad-expert-input-to-capacity"}, "needs --moe-expert-capacity-factor"},
		{[]string{"--num-expert", "4"}, "flag provided but not defined: -num-expert"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			_, err := parseConfig(tinyArgs(t, tc.args...), 0, io.Discard)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// TestMoELayoutsMatchOneRank: a mixture-of-experts model (4 experts, top-2, every second
// layer, aux and z losses) trains from the command line at expert-parallel layouts,
// both dispatchers, with the one-rank run's losses, and generates text with its experts
// spread over ranks.
func TestMoELayoutsMatchOneRank(t *testing.T) {
	moe := []string{"--num-experts", "4", "--moe-layer-freq", "2", "--moe-grouped-gemm", "--moe-aux-loss-coeff", "1e-2",
		"--moe-z-loss-coeff", "1e-3"}
	ref, _ := runTiny(t, tinyArgs(t, moe...))
	for _, layout := range [][]string{
		{"--ranks", "2", "--expert-model-parallel-size", "2", "--moe-token-dispatcher-type", "alltoall"},
		{"--ranks", "4", "--tensor-model-parallel-size", "2", "--sequence-parallel", "--expert-model-parallel-size", "2"},
		{"--ranks", "4", "--pipeline-model-parallel-size", "2", "--expert-model-parallel-size", "2",
			"--moe-token-dispatcher-type", "alltoall", "--use-distributed-optimizer"},
	} {
		t.Run(strings.Join(layout, " "), func(t *testing.T) {
			got, out := runTiny(t, tinyArgs(t, append(append([]string(nil), moe...), layout...)...))
			assert.InDeltaSlice(t, ref.Losses, got.Losses, layoutTol, "training losses")
			t.Logf("largest training-loss difference to one rank: %.2g", maxDiff(ref.Losses, got.Losses))
			assert.InDelta(t, ref.ValidLoss, got.ValidLoss, layoutTol, "validation loss")
			assert.Contains(t, out, "load_balancing_loss")
			assert.Contains(t, out, "generated from the prompt")
		})
	}
}

// moeArgs are ckptArgs with four experts, top-2, grouped GEMM and aux-loss-free
// balancing (the router's expert bias, a state tensor the checkpoint carries).
func moeArgs(t *testing.T, extra ...string) []string {
	return ckptArgs(t, append([]string{"--num-experts", "4", "--moe-router-topk", "2", "--moe-grouped-gemm",
		"--moe-router-enable-expert-bias", "--moe-router-score-function", "sigmoid"}, extra...)...)
}

// TestMoECheckpointResume: an MoE model trained three iterations and saved at one
// expert/tensor-parallel layout, loaded at another and trained three more, gives the
// losses of six straight iterations: bit for bit at the layout it was saved at (the
// experts' parameters, their optimizer state and the router's expert bias are
// restored), within layoutTol at the others (the checkpoint is resharded over EP, TP
// and PP). A run whose expert groups reach beyond the TP group generates text after
// training (every DP rank takes part).
func TestMoECheckpointResume(t *testing.T) {
	ep2 := []string{"--ranks", "2", "--expert-model-parallel-size", "2"}
	tp2 := []string{"--ranks", "2", "--tensor-model-parallel-size", "2", "--sequence-parallel"}
	straight, _ := runTiny(t, moeArgs(t, "--train-iters", "6"))
	straightEP2, out := runTiny(t, moeArgs(t, append([]string{"--train-iters", "6", "--gen-tokens", "4"}, ep2...)...))
	assert.Contains(t, out, "generated from the prompt")
	saved := map[string]string{}
	for name, layout := range map[string][]string{"EP 2": ep2, "TP 2 with SP": tp2} {
		saved[name] = t.TempDir()
		runTiny(t, moeArgs(t, append([]string{"--train-iters", "3", "--save", saved[name]}, layout...)...))
	}
	for _, tc := range []struct {
		save  string
		load  []string
		exact bool
	}{
		{"EP 2", ep2, true},
		{"EP 2", nil, false},
		{"EP 2", tp2, false},
		{"TP 2 with SP", ep2, false},
		{"TP 2 with SP", []string{"--ranks", "2", "--pipeline-model-parallel-size", "2"}, false},
	} {
		t.Run(tc.save+" to "+strings.Join(tc.load, " "), func(t *testing.T) {
			got, out := runTiny(t, moeArgs(t, append([]string{"--train-iters", "6", "--load", saved[tc.save]}, tc.load...)...))
			assert.Contains(t, out, map[string]string{"EP 2": "(saved at TP 1 × PP 1 × DP 2, experts EP 2 × expert-TP 1)\n",
				"TP 2 with SP": "(saved at TP 2 × PP 1 × DP 1)\n"}[tc.save])
			if tc.exact {
				assert.Equal(t, straightEP2.Losses[3:], got.Losses, "resumed on the same layout")
				assert.Equal(t, straightEP2.ValidLoss, got.ValidLoss)
				return
			}
			assert.InDeltaSlice(t, straight.Losses[3:], got.Losses, layoutTol, "resumed at another layout")
		})
	}
}
