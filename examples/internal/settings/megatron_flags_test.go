package settings

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"megago/nn"
)

// checked parses args and runs Check against a small model; it returns the settings
// and Check's messages.
func checked(t *testing.T, args ...string) (*Common, []string) {
	t.Helper()
	c, err := parse(t, args...)
	require.NoError(t, err)
	errs := c.Check(0, func() nn.TransformerConfig {
		return nn.TransformerConfig{NumLayers: c.NumLayers, Hidden: c.HiddenSize, Heads: c.NumAttentionHeads, Vocab: 256,
			MaxPosition: c.MaxPositionEmbeddings}
	})
	return c, errs
}

// TestRampupMatchesMegatron: the consumed samples after each iteration of
// --rampup-batch-size 16 16 96 with a global batch of 32, micro-batches of 8 and DP 2,
// the table of Megatron's tests/unit_tests/test_num_microbatches_calculator.py
// (test_ramp_up), and the iterations of --train-samples 256 (update_train_iters: the
// 11 steps of that table).
func TestRampupMatchesMegatron(t *testing.T) {
	wantConsumed := []int{0, 16, 32, 48, 64, 80, 96, 128, 160, 192, 224, 256}
	c, errs := checked(t, "--ranks", "2", "--micro-batch-size", "8", "--global-batch-size", "32",
		"--train-samples", "256", "--rampup-batch-size", "16", "16", "96")
	require.Empty(t, errs)
	assert.Equal(t, 11, c.TrainIters)
	for it, want := range wantConsumed {
		assert.Equal(t, want, c.ConsumedAt(it), "consumed before iteration %d", it)
		if it+1 < len(wantConsumed) {
			b := wantConsumed[it+1] - want
			assert.Equal(t, b, c.GlobalBatchAt(it), "global batch of iteration %d", it)
			assert.Equal(t, b/16, c.MicrobatchesAt(it), "micro-batches of iteration %d", it)
			assert.Equal(t, b/16, c.ScheduleAt(it).Microbatches())
			assert.Equal(t, b, c.ScheduleIncrement(it), "the schedule counts samples")
		}
	}
	assert.Equal(t, 256, c.TrainSamplesNeeded())
}

// TestRampupSteps: a ramp of several increments, worked out by hand from Megatron's
// update: 48 samples over (32−8)/8 = 3 increments is one increment per 16 samples, so
// the batch after c consumed samples is 8 + 8·⌊c/16⌋ until c exceeds 48.
func TestRampupSteps(t *testing.T) {
	c, errs := checked(t, "--micro-batch-size", "8", "--global-batch-size", "32", "--train-samples", "200",
		"--rampup-batch-size", "8", "8", "48")
	require.Empty(t, errs)
	// consumed: 0 → 8 (8) → 16 (16) → 32 (24) → 56 (32) → 88 → 120 → 152 → 184; 200−184 < 32.
	want := []int{8, 8, 16, 24, 32, 32, 32, 32}
	for it, b := range want {
		assert.Equal(t, b, c.GlobalBatchAt(it), "iteration %d", it)
	}
	assert.Equal(t, len(want), c.TrainIters)
	assert.Equal(t, 200, c.TrainSamplesNeeded())
}

// TestSampleScheduleEqualsIterations: a sample-based schedule whose samples are whole
// global batches of the iteration-based one gives the same learning rate at every
// iteration (Megatron counts samples in both; megago counts iterations when training by
// iterations).
func TestSampleScheduleEqualsIterations(t *testing.T) {
	common := []string{"--micro-batch-size", "4", "--lr-decay-style", "cosine", "--lr", "0.01", "--min-lr", "0.001"}
	iters, errs := checked(t, append(common, "--train-iters", "10", "--lr-warmup-iters", "2", "--lr-decay-iters", "8")...)
	require.Empty(t, errs)
	samples, errs := checked(t, append(common, "--train-samples", "40", "--lr-warmup-samples", "8", "--lr-decay-samples", "32")...)
	require.Empty(t, errs)
	assert.Equal(t, 10, samples.TrainIters)
	oi, err := iters.OptimConfig()
	require.NoError(t, err)
	osamp, err := samples.OptimConfig()
	require.NoError(t, err)
	for it := 0; it <= 10; it++ {
		assert.Equal(t, 1, iters.ScheduleIncrement(it))
		assert.InDelta(t, oi.Schedule.LRAt(it), osamp.Schedule.LRAt(samples.ConsumedAt(it)), 1e-15, "iteration %d", it) // the same ratios, in float64
	}
	assert.Equal(t, 2, samples.WarmupIters())
}

// TestMegatronFlagChecks: the settings Megatron's validate_args (and megago) refuse,
// each message naming the flags.
func TestMegatronFlagChecks(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string // a part of one message
	}{
		{"iterations and samples", []string{"--train-iters", "5", "--train-samples", "20"}, "--train-samples and --train-iters are exclusive"},
		{"decay iterations with samples", []string{"--train-samples", "20", "--lr-decay-iters", "5"}, "--train-samples and --lr-decay-iters are exclusive"},
		{"warmup iterations with samples", []string{"--train-samples", "20", "--lr-warmup-iters", "1"}, "--train-samples and --lr-warmup-iters are exclusive"},
		{"two warmups", []string{"--train-samples", "20", "--lr-warmup-samples", "4", "--lr-warmup-fraction", "0.1"}, "--lr-warmup-fraction and --lr-warmup-samples are exclusive"},
		{"decay samples without samples", []string{"--lr-decay-samples", "20"}, "--lr-decay-samples needs --train-samples"},
		{"ramp-up without samples", []string{"--rampup-batch-size", "4", "4", "8", "--global-batch-size", "8"}, "--rampup-batch-size needs --train-samples"},
		{"too few samples", []string{"--train-samples", "3"}, "--train-samples 3 is less than one global batch of 4"},
		{"zero samples", []string{"--train-samples", "0"}, "--train-samples must be at least 1"},
		{"ramp-up of two values", []string{"--train-samples", "64", "--global-batch-size", "8", "--rampup-batch-size", "4", "4"}, "wants START INCREMENT SAMPLES, got 2 values"},
		{"ramp-up from the global batch", []string{"--train-samples", "64", "--rampup-batch-size", "4", "4", "8"}, "start 4 must be below --global-batch-size 4"},
		{"ramp-up increment", []string{"--train-samples", "64", "--global-batch-size", "12", "--rampup-batch-size", "4", "3", "8"}, "12 minus start 4 is not a multiple of the increment 3"},
		{"ramp-up against DP", []string{"--ranks", "2", "--micro-batch-size", "2", "--train-samples", "64", "--global-batch-size", "8", "--rampup-batch-size", "2", "2", "8"},
			"the global batch 2 (iteration 1 of the ramp) is not a multiple of micro-batch size 2 × DP 2"},
		{"two data sources", []string{"--mock-data", "--data-path", "a"}, "give one source of data"},
		{"valid path alone", []string{"--valid-data-path", "a"}, "--valid-data-path and --test-data-path need --train-data-path"},
		{"split path weights", []string{"--train-data-path", "0.5", "a", "b"}, `--train-data-path: "0.5 a b": want weight-prefix pairs`},
		{"cache alias twice", []string{"--cache-dir", "a", "--data-cache-path", "b"}, "--data-cache-path and --cache-dir are exclusive"},
		{"selective and full", []string{"--recompute-activations", "--recompute-granularity", "full"}, "--recompute-activations is --recompute-granularity selective"},
		{"method without full", []string{"--recompute-method", "uniform"}, "--recompute-method needs --recompute-granularity full"},
		{"unknown method", []string{"--recompute-granularity", "full", "--recompute-method", "random"}, `--recompute-method "random": want uniform or block`},
		{"layers without method", []string{"--recompute-granularity", "full", "--recompute-num-layers", "1"}, "--recompute-num-layers needs --recompute-method"},
		{"uniform units of 2", []string{"--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "2"}, "units of several layers are not implemented"},
		{"block of some layers", []string{"--recompute-granularity", "full", "--recompute-method", "block", "--recompute-num-layers", "3"}, "recomputing 3 of the 4 layers of each stage is not implemented"},
		{"more layers than the stage", []string{"--recompute-granularity", "full", "--recompute-method", "block", "--recompute-num-layers", "5"}, "--recompute-num-layers 5 must be between 1 and the 4 layers per pipeline rank"},
		{"no-load-optim without load", []string{"--no-load-optim"}, "--no-load-optim and --no-load-rng need --load"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, errs := checked(t, tc.args...)
			assert.Contains(t, strings.Join(errs, "\n"), tc.want)
		})
	}
}

// TestRecomputeFlags: Megatron's recomputation flags and the granularity nn builds.
func TestRecomputeFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want nn.Recompute
	}{
		{nil, nn.RecomputeNone},
		{[]string{"--recompute-activations"}, nn.RecomputeSelective},
		{[]string{"--recompute-activations", "--recompute-granularity", "selective"}, nn.RecomputeSelective},
		{[]string{"--recompute-granularity", "full"}, nn.RecomputeFull},
		{[]string{"--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"}, nn.RecomputeFull},
		{[]string{"--recompute-granularity", "full", "--recompute-method", "block", "--recompute-num-layers", "4"}, nn.RecomputeFull},
		{[]string{"--ranks", "2", "--pipeline-model-parallel-size", "2", "--recompute-granularity", "full", "--recompute-method", "block", "--recompute-num-layers", "2"}, nn.RecomputeFull},
		{[]string{"--use-flash-attn"}, nn.RecomputeNone},
	} {
		c, errs := checked(t, tc.args...)
		require.Empty(t, errs, "%v", tc.args)
		assert.Equal(t, tc.want, c.Recompute(), "%v", tc.args)
	}
}

// TestListFlagsAndAliases: Megatron's lists on the command line and in --config
// files, and --cache-dir as --data-cache-path.
func TestListFlagsAndAliases(t *testing.T) {
	c, err := parse(t, "--train-data-path", "0.7", "a", "0.3", "b", "--valid-data-path", "v", "--cache-dir", "/tmp/x",
		"--rampup-batch-size", "1", "2", "3", "--use-flash-attn")
	require.NoError(t, err)
	assert.Equal(t, []string{"0.7", "a", "0.3", "b"}, c.TrainDataPath)
	assert.Equal(t, []string{"v"}, c.ValidDataPath)
	assert.Equal(t, []string{"1", "2", "3"}, c.RampupBatchSize)
	assert.Equal(t, "/tmp/x", c.CacheDir)
	assert.True(t, c.UseFlashAttn)

	file := filepath.Join(t.TempDir(), "run.json")
	require.NoError(t, os.WriteFile(file, []byte(`{"rampup_batch_size": [16, 16, 96], "data_cache_path": "/tmp/y",
		"train_samples": 256, "test_data_path": ["t"]}`), 0o644))
	c, err = parse(t, "--config", file)
	require.NoError(t, err)
	assert.Equal(t, []string{"16", "16", "96"}, c.RampupBatchSize)
	assert.Equal(t, "/tmp/y", c.CacheDir)
	assert.Equal(t, 256, c.TrainSamples)
	assert.True(t, c.SampleBased())
	assert.Equal(t, []string{"t"}, c.TestDataPath)
}

// TestRemovedFlags: the flags Megatron removed are refused with their replacement, on
// the command line and in --config files; an example's own flag of such a name is not.
func TestRemovedFlags(t *testing.T) {
	for _, tc := range []struct{ args []string }{
		{[]string{"--warmup", "0.01"}},
		{[]string{"-warmup=0.01"}},
		{[]string{"--num-layers", "2", "--batch-size", "4"}},
		{[]string{"--model-parallel-size", "2"}},
		{[]string{"--checkpoint-activations"}},
	} {
		_, err := parse(t, tc.args...)
		require.Error(t, err, "%v", tc.args)
		assert.Contains(t, err.Error(), "is no longer valid in Megatron-LM, nor here: use --", "%v", tc.args)
	}
	_, err := parse(t, "--warmup", "0.01")
	assert.EqualError(t, err, "--warmup is no longer valid in Megatron-LM, nor here: use --lr-warmup-fraction (or --lr-warmup-iters, --lr-warmup-samples)")
	_, err = parse(t, "--batch-size", "4")
	assert.ErrorContains(t, err, "use --micro-batch-size")

	file := filepath.Join(t.TempDir(), "old.json")
	require.NoError(t, os.WriteFile(file, []byte(`{"num_layers": 2, "warmup": 0.01}`), 0o644))
	_, err = parse(t, "--config", file)
	assert.ErrorContains(t, err, `key "warmup": --warmup is no longer valid in Megatron-LM, nor here: use --lr-warmup-fraction`)

	c := Defaults()
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	c.Register(fs, "nothing")
	var warmup int
	fs.IntVar(&warmup, "warmup", 0, "untimed steps: an example's own flag")
	require.NoError(t, c.Parse(fs, []string{"--warmup", "3"}, "usage\n", io.Discard))
	assert.Equal(t, 3, warmup)
}

// TestMegatronDefaults: the start-up block names megago's defaults that differ from
// Megatron's (values from Megatron's arguments.py and TransformerConfig), marks the
// given ones, and is empty for a script that states Megatron's values.
func TestMegatronDefaults(t *testing.T) {
	c, errs := checked(t, "--hidden-dropout", "0.1")
	require.Empty(t, errs)
	got := c.MegatronDefaults()
	for _, want := range []string{"--attention-dropout 0 (0.1)", "--adam-beta2 0.95 (0.999)", "--weight-decay 0.1 (0.01)",
		"--lr-decay-style cosine (linear)", "--lr-warmup-fraction 0.05 (none)", "--min-lr 0.0001 (0)",
		"--seq-length 128 (required)", "--train-iters 600 (required)", "--lr 0.002 (required)", "--eval-iters 20 (100)"} {
		assert.Contains(t, got, want)
	}
	assert.NotContains(t, got, "hidden-dropout", "given as Megatron's")
	assert.NotContains(t, got, "init-method-std", "the same as Megatron's")
	assert.True(t, strings.HasPrefix(got, "settings that differ from Megatron-LM's defaults"), got)
	for _, line := range strings.Split(strings.TrimSuffix(got, "\n"), "\n") {
		assert.LessOrEqual(t, len(line), 110, line)
	}

	c, errs = checked(t, "--adam-beta2", "0.98")
	require.Empty(t, errs)
	assert.Contains(t, c.MegatronDefaults(), "*--adam-beta2 0.98 (0.999)")

	megatron := []string{"--hidden-dropout", "0.1", "--attention-dropout", "0.1", "--adam-beta2", "0.999",
		"--weight-decay", "0.01", "--lr-decay-style", "linear", "--lr-warmup-fraction", "0", "--min-lr", "0",
		"--eval-iters", "100", "--log-interval", "100", "--seq-length", "128", "--micro-batch-size", "4",
		"--train-iters", "600", "--lr", "0.002"}
	c, errs = checked(t, megatron...)
	require.Empty(t, errs)
	assert.Equal(t, "", c.MegatronDefaults())
}
