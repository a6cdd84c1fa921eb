package main

import (
	"bytes"
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBadSettings: every bad setting stops the run with one message naming it, before
// training starts (the output directory is never created).
func TestBadSettings(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want []string // substrings of the error
	}{
		{"mask prob", []string{"--mask-prob", "0"}, []string{"--mask-prob 0 is outside (0, 1]"}},
		{"short seq prob", []string{"--short-seq-prob", "1.5"}, []string{"--short-seq-prob 1.5 is outside [0, 1]"}},
		{"seq length", []string{"--seq-length", "4"}, []string{"--seq-length 4 leaves no room"}},
		{"max ngram", []string{"--masking-max-ngram", "0"}, []string{"--masking-max-ngram must be at least 1"}},
		{"ranks not divisible", []string{"--ranks", "3", "--pipeline-model-parallel-size", "2"},
			[]string{"3 ranks do not divide into TP=1 × PP=2"}},
		{"classify without load", []string{"--finetune-classify"}, []string{"--finetune-classify needs --load"}},
		{"classify one package", []string{"--finetune-classify", "--load", "x", "--classify-packages", "net"},
			[]string{"want at least 2 comma-separated packages"}},
		{"classify own data", []string{"--finetune-classify", "--load", "x", "--data-path", "y"},
			[]string{"takes no --data-path"}},
		{"classify load missing", []string{"--finetune-classify", "--load", "missing-dir"},
			[]string{"--load", "no checkpoint in missing-dir"}},
		{"fill line", []string{"--fill-line", "9"}, []string{"--fill-line 9: --fill-text has 4 non-blank lines"}},
		{"fill text too long", []string{"--seq-length", "8"}, []string{"--fill-text is", "tokens as a sentence pair, more than --seq-length 8"}},
		{"classify save", []string{"--finetune-classify", "--load", "x", "--save", "y"}, []string{"does not save the classifier"}},
		{"unknown flag", []string{"--mask-probability", "0.2"}, []string{"flag provided but not defined: -mask-probability"}},
		{"context parallelism", []string{"--ranks", "2", "--context-parallel-size", "2"},
			[]string{"--context-parallel-size 2: context parallelism is implemented for the GPT only; the bert example"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			args := append([]string{"--cache-dir", testCache, "--out-dir", out, "--num-layers", "2", "--hidden-size", "32",
				"--seq-length", "32"}, tc.args...)
			var stdout bytes.Buffer
			_, err := run(context.Background(), args, noEnv, &stdout, io.Discard)
			require.Error(t, err)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
			assert.NoDirExists(t, out, "no work started")
		})
	}
}

// TestFlags: Megatron's names, the BERT defaults and the fine-tuning defaults.
func TestFlags(t *testing.T) {
	c, err := parseConfig([]string{"--mask-prob", "0.2", "--bert-no-binary-head", "--ranks", "2"}, 0, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 0.2, c.MaskProb)
	assert.True(t, c.NoBinaryHead)
	assert.True(t, c.modelConfig(100).NoBinaryHead)
	assert.Equal(t, 2, c.DP)
	assert.Equal(t, "bert.out", c.OutDir)

	c, err = parseConfig([]string{"--finetune-classify", "--load", "x", "--lr", "1e-4"}, 0, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 1e-4, c.LR, "given flags win")
	assert.Equal(t, 300, c.TrainIters, "fine-tuning defaults")
	assert.Equal(t, "80,20,0", c.Split)
	assert.Equal(t, []string{"crypto", "math", "net", "runtime"}, c.packages())

	var out bytes.Buffer
	_, err = run(context.Background(), []string{"-help"}, noEnv, &out, io.Discard)
	assert.ErrorIs(t, err, errHelp)
	for _, f := range []string{"-mask-prob", "-short-seq-prob", "-bert-no-binary-head", "-finetune-classify", "-config"} {
		assert.True(t, strings.Contains(out.String(), f), f)
	}
}
