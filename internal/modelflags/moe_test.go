package modelflags

import (
	"flag"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"megago/nn"
)

// parseMoE parses args as the MoE flags.
func parseMoE(t *testing.T, args ...string) MoE {
	t.Helper()
	m := MoEDefaults()
	parseInto(t, &m, args...)
	return m
}

// parseInto registers the flags of f and parses args into them.
func parseInto(t *testing.T, f interface{ Register(*flag.FlagSet) }, args ...string) {
	t.Helper()
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	f.Register(fs)
	require.NoError(t, fs.Parse(args))
}

// TestMoEFlagsFillTheConfig: each flag reaches its field of nn.MoEConfig, Megatron's
// defaults as nn's zero values.
func TestMoEFlagsFillTheConfig(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want nn.MoEConfig
	}{
		{nil, nn.MoEConfig{}},
		{[]string{"--num-experts", "8"}, nn.MoEConfig{NumExperts: 8, TopK: 2, EP: 1}},
		{[]string{"--num-experts", "8", "--moe-router-topk", "1", "--moe-router-pre-softmax", "--moe-layer-freq", "2",
			"--moe-ffn-hidden-size", "64", "--moe-grouped-gemm", "--moe-aux-loss-coeff", "1e-2", "--moe-z-loss-coeff", "1e-3"},
			nn.MoEConfig{NumExperts: 8, TopK: 1, PreSoftmax: true, LayerFreq: 2, FFNHidden: 64, GroupedGEMM: true,
				AuxLossCoeff: 1e-2, ZLossCoeff: 1e-3, EP: 1}},
		{[]string{"--num-experts", "4", "--moe-layer-freq", "([1]*1+[0]*1)*2", "--moe-router-score-function", "sigmoid",
			"--moe-router-enable-expert-bias", "--moe-router-load-balancing-type", "none"},
			nn.MoEConfig{NumExperts: 4, TopK: 2, LayerPattern: "1,0,1,0", ScoreFunction: "sigmoid", EnableExpertBias: true,
				BiasUpdateRate: 1e-3, LoadBalancing: "none", EP: 1}},
		{[]string{"--num-experts", "4", "--moe-expert-capacity-factor", "1.5", "--moe-token-drop-policy", "position",
			"--moe-pad-expert-input-to-capacity", "--moe-shared-expert-intermediate-size", "96", "--moe-shared-expert-gate",
			"--moe-token-dispatcher-type", "alltoall", "--expert-model-parallel-size", "2", "--expert-tensor-parallel-size", "1"},
			nn.MoEConfig{NumExperts: 4, TopK: 2, CapacityFactor: 1.5, DropPolicy: "position", PadToCapacity: true,
				SharedExpertFFNHidden: 96, SharedExpertGate: true, Dispatcher: "alltoall", EP: 2, ETP: 1}},
		{[]string{"--num-experts", "4", "--moe-expert-capacity-factor", "-1"}, nn.MoEConfig{NumExperts: 4, TopK: 2, EP: 1}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			m := parseMoE(t, tc.args...)
			require.Empty(t, m.Check(4, 128))
			c := nn.TransformerConfig{NumLayers: 4}
			m.Apply(&c)
			assert.Equal(t, tc.want, c.MoE)
			// The model flags come back from the configuration: the same model.
			back := nn.TransformerConfig{NumLayers: 4}
			MoEFromConfig(c.MoE, m).Apply(&back)
			assert.Equal(t, tc.want, back.MoE)
		})
	}
}

// TestMoEFlagRefusals: impossible MoE flags are refused before any work, in Megatron's
// words where it has them.
func TestMoEFlagRefusals(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--num-experts", "-1"}, "--num-experts -1 must not be negative"},
		{[]string{"--moe-router-topk", "4", "--moe-grouped-gemm"}, "--moe-router-topk 4, --moe-grouped-gemm true: mixture-of-experts flags need --num-experts"},
		{[]string{"--expert-model-parallel-size", "2"}, "--expert-model-parallel-size 2: mixture-of-experts flags need --num-experts"},
		{[]string{"--num-experts", "4", "--moe-router-topk", "5"}, "--moe-router-topk 5 must be between 1 and --num-experts 4"},
		{[]string{"--num-experts", "4", "--moe-router-topk", "0"}, "--moe-router-topk 0 must be between 1"},
		{[]string{"--num-experts", "4", "--moe-router-topk", "1"}, "Please use --moe-router-pre-softmax when topk is 1."},
		{[]string{"--num-experts", "4", "--moe-router-score-function", "tanh"}, `--moe-router-score-function "tanh": want softmax, sigmoid`},
		{[]string{"--num-experts", "4", "--moe-router-score-function", "sqrtsoftplus"}, "sqrtsoftplus is not implemented"},
		{[]string{"--num-experts", "4", "--moe-router-enable-expert-bias"}, "--moe-router-enable-expert-bias needs --moe-router-score-function sigmoid"},
		{[]string{"--num-experts", "4", "--moe-router-load-balancing-type", "sinkhorn"}, "--moe-router-load-balancing-type sinkhorn is not implemented"},
		{[]string{"--num-experts", "4", "--moe-router-load-balancing-type", "aux"}, `--moe-router-load-balancing-type "aux": want aux_loss, seq_aux_loss, global_aux_loss, none`},
		{[]string{"--num-experts", "4", "--moe-aux-loss-coeff", "-0.1"}, "--moe-aux-loss-coeff -0.1 must be a finite number ≥ 0"},
		{[]string{"--num-experts", "4", "--moe-z-loss-coeff", "NaN"}, "--moe-z-loss-coeff NaN must be a finite number ≥ 0"},
		{[]string{"--num-experts", "4", "--moe-router-bias-update-rate", "-1"}, "--moe-router-bias-update-rate -1 must be"},
		{[]string{"--num-experts", "4", "--moe-expert-capacity-factor", "Inf"}, "--moe-expert-capacity-factor +Inf must be finite"},
		{[]string{"--num-experts", "4", "--moe-pad-expert-input-to-capacity"}, "--moe-pad-expert-input-to-capacity needs --moe-expert-capacity-factor"},
		{[]string{"--num-experts", "4", "--moe-token-drop-policy", "random"}, `--moe-token-drop-policy "random": want probs, position`},
		{[]string{"--num-experts", "4", "--moe-token-dispatcher-type", "flex"}, "--moe-token-dispatcher-type flex is not implemented"},
		{[]string{"--num-experts", "4", "--moe-layer-freq", "[1,0,1]"}, `--moe-layer-freq "[1,0,1]" has 3 layers, --num-layers 4`},
		{[]string{"--num-experts", "4", "--moe-layer-freq", "[0]*4"}, "has no MoE layer"},
		{[]string{"--num-experts", "4", "--moe-layer-freq", "[1]*2+[2]*2"}, "must be 0 (dense layer) or 1"},
		{[]string{"--num-experts", "4", "--moe-ffn-hidden-size", "-8"}, "--moe-ffn-hidden-size -8 and --moe-shared-expert-intermediate-size 0 must not be negative"},
		{[]string{"--num-experts", "4", "--moe-shared-expert-gate"}, "--moe-shared-expert-gate needs --moe-shared-expert-intermediate-size"},
		{[]string{"--num-experts", "6", "--expert-model-parallel-size", "4"}, "--num-experts 6 is not divisible by --expert-model-parallel-size 4"},
		{[]string{"--num-experts", "4", "--expert-model-parallel-size", "0"}, "--expert-model-parallel-size 0 must be at least 1"},
		{[]string{"--num-experts", "4", "--expert-tensor-parallel-size", "3"}, "the expert hidden size 128 (--moe-ffn-hidden-size, default --ffn-hidden-size) is not divisible by --expert-tensor-parallel-size 3"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			errs := parseMoE(t, tc.args...).Check(4, 128)
			require.NotEmpty(t, errs)
			assert.Contains(t, strings.Join(errs, "\n"), tc.want)
		})
	}
}

// TestMoELayout: the experts' decomposition world = ETP × EP × expert-DP × PP.
func TestMoELayout(t *testing.T) {
	for _, tc := range []struct {
		args               []string
		world, tp, pp, edp int
		want               string
	}{
		{[]string{"--expert-model-parallel-size", "2"}, 2, 1, 1, 1, ""},
		{[]string{"--expert-model-parallel-size", "2"}, 8, 1, 2, 2, ""},
		{[]string{"--expert-model-parallel-size", "2"}, 8, 2, 2, 1, ""}, // ETP = TP 2
		{[]string{"--expert-model-parallel-size", "4", "--expert-tensor-parallel-size", "1"}, 8, 2, 2, 1, ""},
		{[]string{"--expert-model-parallel-size", "4"}, 8, 1, 4, 0, "does not divide the 2 ranks of each pipeline stage"},
		{[]string{"--expert-model-parallel-size", "2"}, 4, 4, 1, 0, "expert-tensor-parallel size 4 × --expert-model-parallel-size 2"},
		{[]string{"--moe-ffn-hidden-size", "6"}, 4, 4, 1, 0, "the expert hidden size 6 (--moe-ffn-hidden-size, default --ffn-hidden-size) is not divisible by the expert-tensor-parallel size 4"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			m := parseMoE(t, append([]string{"--num-experts", "8"}, tc.args...)...)
			require.Empty(t, m.Check(4, 128))
			errs := m.CheckLayout(tc.world, tc.tp, tc.pp, 128)
			if tc.want == "" {
				require.Empty(t, errs)
				assert.Equal(t, tc.edp, m.ExpertDP(tc.world, tc.tp, tc.pp))
				return
			}
			require.Len(t, errs, 1)
			assert.Contains(t, errs[0], tc.want)
		})
	}
}

// TestMoEDescribe: the experts in the words of the model's header line.
func TestMoEDescribe(t *testing.T) {
	assert.Equal(t, "", MoEDefaults().Describe())
	m := parseMoE(t, "--num-experts", "8", "--moe-grouped-gemm", "--moe-aux-loss-coeff", "0.01", "--moe-layer-freq", "2")
	assert.Equal(t, "8 experts, top-2, MoE every 2 layers, aux_loss 0.01, grouped GEMM", m.Describe())
}
