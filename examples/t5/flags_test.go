package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBadSettings: every bad setting stops the run with one message naming it, before
// training starts.
func TestBadSettings(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want []string // substrings of the error
	}{
		{"pipeline", []string{"--ranks", "2", "--pipeline-model-parallel-size", "2"},
			[]string{"--pipeline-model-parallel-size 2: T5 runs with tensor and data parallelism only"}},
		{"decoder too short", []string{"--decoder-seq-length", "2"}, []string{"--decoder-seq-length must be at least 3"}},
		{"no sentinels", []string{"--vocab-extra-ids", "0"}, []string{"--vocab-extra-ids must be at least 1"}},
		{"mask prob", []string{"--mask-prob", "0"}, []string{"--mask-prob 0 is outside (0, 1]"}},
		{"short seq prob", []string{"--short-seq-prob", "1.5"}, []string{"--short-seq-prob 1.5 is outside [0, 1]"}},
		{"negative layers", []string{"--decoder-num-layers", "-1"}, []string{"--decoder-num-layers must not be negative"}},
		{"sequence parallel", []string{"--ranks", "2", "--tensor-model-parallel-size", "2", "--sequence-parallel",
			"--decoder-seq-length", "15"}, []string{"--decoder-seq-length 15 must be divisible by TP 2"}},
		{"heads not divisible by TP", []string{"--ranks", "2", "--tensor-model-parallel-size", "2", "--num-attention-heads", "3", "--hidden-size", "33"},
			[]string{"--num-attention-heads 3 is not divisible by --tensor-model-parallel-size 2"}},
		{"several at once", []string{"--mask-prob", "2", "--decoder-seq-length", "1"}, []string{"--mask-prob 2", "--decoder-seq-length must"}},
		{"unknown flag", []string{"--num-layer", "2"}, []string{"flag provided but not defined: -num-layer"}},
		{"context parallelism", []string{"--ranks", "2", "--context-parallel-size", "2"},
			[]string{"--context-parallel-size 2: context parallelism is implemented for the GPT only; the t5 example"}},
		{"fill without validation", []string{"--fill-sample", "2", "--eval-iters", "0"}, []string{"--fill-sample 2 needs a validation split"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseConfig(tinyArgs(t, tc.args...), 0, io.Discard)
			require.Error(t, err)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

// TestFlags: Megatron's names, --encoder-seq-length as --seq-length, per-stack layer
// counts, and the JSON file of --config with Megatron's underscores.
func TestFlags(t *testing.T) {
	cfg, err := parseConfig([]string{"--encoder-seq-length", "48", "--decoder-seq-length", "12", "--num-layers", "3",
		"--decoder-num-layers", "1", "--kv-channels", "16", "--vocab-extra-ids", "10", "--mask-prob", "0.15"}, 0, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 48, cfg.SeqLength)
	m := cfg.modelConfig(1000)
	assert.Equal(t, 3, m.NumLayers)
	assert.Equal(t, 1, m.DecoderLayers)
	assert.Equal(t, 16, m.HeadSize)
	assert.Equal(t, 10, cfg.VocabExtraIDs)
	assert.Equal(t, 0.15, cfg.MaskProb)

	file := filepath.Join(t.TempDir(), "t5.json")
	require.NoError(t, os.WriteFile(file, []byte(`{"decoder_seq_length": 20, "mask_prob": 0.2, "seq_length": 40}`), 0o644))
	cfg, err = parseConfig([]string{"--config", file, "--seq-length", "56"}, 0, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 20, cfg.DecoderSeqLength)
	assert.Equal(t, 0.2, cfg.MaskProb)
	assert.Equal(t, 56, cfg.SeqLength, "flags override the file")
}

// TestBadFill: a --fill-text without sentinels or a --fill-sample past the validation
// split stops the run before training.
func TestBadFill(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--fill-text", "func f() {}"}, `--fill-text "func f() {}" has no sentinel to fill`},
		{[]string{"--fill-sample", "100000"}, "--fill-sample 100000: the validation split has"},
	} {
		var out strings.Builder
		_, err := run(context.Background(), tinyArgs(t, tc.args...), noEnv, &out, io.Discard)
		require.ErrorContains(t, err, tc.want)
		assert.NotContains(t, out.String(), "iter ", "no training")
	}
}

func TestHelp(t *testing.T) {
	var out strings.Builder
	_, err := run(context.Background(), []string{"-help"}, noEnv, &out, io.Discard)
	require.ErrorIs(t, err, errHelp)
	for _, want := range []string{"Usage: go run ./examples/t5", "-decoder-seq-length", "-vocab-extra-ids", "-mask-prob", "-encoder-seq-length"} {
		assert.Contains(t, out.String(), want)
	}
}
