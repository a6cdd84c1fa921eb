package settings

import (
	"flag"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	_ "megago/internal/device" // registers the cuda backend
	"megago/nn"
)

func parse(t *testing.T, args ...string) (*Common, error) {
	t.Helper()
	c := Defaults()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	c.Register(fs, "nothing")
	return &c, c.Parse(fs, args, "usage\n", io.Discard)
}

func TestConfigFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "run.json")
	require.NoError(t, os.WriteFile(file, []byte(`{"num_layers": 6, "hidden-size": 96, "bf16": true,
		"data-path": ["0.3", "a", "0.7", "b"]}`), 0o644))
	c, err := parse(t, "--config", file, "--hidden-size", "64")
	require.NoError(t, err)
	assert.Equal(t, 6, c.NumLayers, "underscores name flags too")
	assert.Equal(t, 64, c.HiddenSize, "flags override the file")
	assert.True(t, c.BF16)
	assert.True(t, c.Set["num-layers"] && c.Set["hidden-size"] && !c.Set["lr"])
	prefixes, weights, err := c.Blend()
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "b"}, prefixes)
	assert.Equal(t, []float64{0.3, 0.7}, weights)

	_, err = parse(t, "unexpected")
	assert.ErrorContains(t, err, `unexpected argument "unexpected"`)
	var out strings.Builder
	c2 := Defaults()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	c2.Register(fs, "nothing")
	assert.ErrorIs(t, c2.Parse(fs, []string{"-help"}, "Usage: test\n", &out), ErrHelp)
	assert.Contains(t, out.String(), "Usage: test\n")
	assert.Contains(t, out.String(), "-tensor-model-parallel-size")
}

// TestFLOPs checks FLOPs against BENCHMARKS.md's W2 row: L=4, C=256, V=8192, batch
// 8 × 256: 70.87 model GFLOP per step.
func TestFLOPs(t *testing.T) {
	c, err := parse(t, "--num-layers", "4", "--hidden-size", "256", "--seq-length", "256", "--micro-batch-size", "8")
	require.NoError(t, err)
	c.GlobalBatchSize = 8
	assert.InDelta(t, 70.87e9, c.FLOPs(8192), 0.01e9)
}

func TestNonNegative(t *testing.T) {
	assert.Equal(t, []string{"--a must not be negative, got -1", "--c must not be negative, got -3"},
		NonNegative(map[string]int{"--c": -3, "--b": 0, "--a": -1}))
	assert.NoError(t, Error(nil))
	assert.EqualError(t, Error([]string{"x", "y"}), "invalid settings:\n  x\n  y")
}

// TestNumbers: NaN and infinities are refused like values out of range, in the order
// of the names.
func TestNumbers(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	assert.Equal(t, []string{"--a must be a finite number ≥ 0, got NaN", "--b must be a finite number ≥ 0, got +Inf",
		"--d must be a finite number ≥ 0, got -1"},
		NonNegativeNumbers(map[string]float64{"--d": -1, "--c": 0, "--b": inf, "--a": nan}))
	assert.Equal(t, []string{"--a must be a finite number > 0, got 0", "--b must be a finite number > 0, got NaN"},
		PositiveNumbers(map[string]float64{"--a": 0, "--b": nan, "--c": 1e-30}))
	assert.Equal(t, []string{"--a NaN is outside [0, 1)", "--b 1 is outside [0, 1)", "--d -0.1 is outside [0, 1)"},
		Fractions(map[string]float64{"--a": nan, "--b": 1, "--c": 0, "--d": -0.1}))
}

// TestOverlapFlags: Megatron's overlap flags and what they set, and the settings that
// cannot work, refused by Check before any work.
func TestOverlapFlags(t *testing.T) {
	model := func(c *Common) func() nn.TransformerConfig {
		return func() nn.TransformerConfig {
			return nn.TransformerConfig{NumLayers: c.NumLayers, Hidden: c.HiddenSize, Heads: c.NumAttentionHeads, Vocab: 256,
				MaxPosition: c.MaxPositionEmbeddings}
		}
	}
	for _, tc := range []struct {
		name       string
		args       []string
		want       []string // Check's messages
		bucket     int
		noOverlap  bool
		overlapOpt bool
	}{
		{"defaults: nothing overlaps", []string{"--ranks", "2"}, nil, 40_000_000, true, false},
		{"Megatron's default bucket grows with DP", []string{"--ranks", "64"}, nil, 64_000_000, true, false},
		{"overlapped reduction", []string{"--ranks", "2", "--overlap-grad-reduce", "--ddp-bucket-size", "1000"}, nil, 1000, false, false},
		{"the bucket size does not depend on overlapping", []string{"--ranks", "2", "--ddp-bucket-size", "1000"}, nil, 1000, true, false},
		{"overlapped gather", []string{"--ranks", "2", "--use-distributed-optimizer", "--overlap-grad-reduce", "--overlap-param-gather"},
			nil, 40_000_000, false, true},
		{"gather without the distributed optimizer", []string{"--ranks", "2", "--overlap-grad-reduce", "--overlap-param-gather"},
			[]string{"--overlap-param-gather only supported with distributed optimizer (--use-distributed-optimizer)"}, 0, false, false},
		{"gather without overlapped reduction", []string{"--ranks", "2", "--use-distributed-optimizer", "--overlap-param-gather"},
			[]string{"Must use --overlap-param-gather with --overlap-grad-reduce"}, 0, false, false},
		{"zero bucket size", []string{"--ddp-bucket-size", "0"}, []string{"--ddp-bucket-size must be at least 1, got 0"}, 0, false, false},
		{"negative bucket size", []string{"--overlap-grad-reduce", "--ddp-bucket-size", "-5"},
			[]string{"--ddp-bucket-size must be at least 1, got -5"}, 0, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parse(t, tc.args...)
			require.NoError(t, err)
			errs := c.Check(0, model(c))
			if tc.want != nil {
				assert.Equal(t, tc.want, errs)
				return
			}
			require.Empty(t, errs)
			ocfg, err := c.OptimConfig()
			require.NoError(t, err)
			assert.Equal(t, tc.bucket, ocfg.BucketSize)
			assert.Equal(t, tc.overlapOpt, ocfg.OverlapParamGather)
			assert.Equal(t, tc.noOverlap, c.TrainConfig(ocfg).NoOverlap)
		})
	}
}

// TestCheckDevice: --device names a registered backend (cuda is registered by
// internal/device, which this test imports), and NCCL needs cuda.
func TestCheckDevice(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string // nil: accepted
	}{
		{nil, nil},
		{[]string{"--device", "cuda", "--distributed-backend", "nccl"}, nil},
		{[]string{"--device", "cuda", "--distributed-backend", "gloo"}, nil},
		{[]string{"--distributed-backend", "nccl"}, []string{"--distributed-backend nccl requires --device cuda (NCCL runs on GPUs), not --device cpu"}},
		{[]string{"--device", "tpu"}, []string{`--device "tpu": want one of [cpu cuda]`}},
		{[]string{"--device", "tpu", "--distributed-backend", "mpi"}, []string{`--device "tpu": want one of [cpu cuda]`,
			`--distributed-backend "mpi": want tcp, gloo (same as tcp) or nccl`}},
	} {
		c, err := parse(t, tc.args...)
		require.NoError(t, err)
		assert.Equal(t, tc.want, c.checkDevice(), "%v", tc.args)
	}
}

// TestContextParallelFlags: Megatron's CP flags on the command line (lists of words) and
// in a --config file (JSON lists, underscores) reach Common.CP, and the world is
// TP × CP × PP × DP.
func TestContextParallelFlags(t *testing.T) {
	file := filepath.Join(t.TempDir(), "run.json")
	require.NoError(t, os.WriteFile(file, []byte(`{"context_parallel_size": 4, "cp_comm_type": ["a2a+p2p"],
		"hierarchical_context_parallel_sizes": [2, 2]}`), 0o644))
	for _, args := range [][]string{
		{"--context-parallel-size", "4", "--cp-comm-type", "a2a+p2p", "--hierarchical-context-parallel-sizes", "2", "2", "--ranks", "8"},
		{"--config", file, "--ranks", "8"},
	} {
		c, err := parse(t, args...)
		require.NoError(t, err, args)
		assert.Equal(t, 4, c.CP.Size, args)
		assert.Equal(t, []string{"a2a+p2p"}, c.CP.CommType, args)
		assert.Equal(t, []int{2, 2}, c.CP.Hierarchy, args)
		require.Empty(t, c.checkLayout(0), args)
		assert.Equal(t, 2, c.DP, "8 ranks = TP 1 × CP 4 × PP 1 × DP 2")
	}
}
