package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"megago/data"
)

// TestBadSettings: every bad setting stops the run with one message naming it, before
// training starts (the output directory is never created).
func TestBadSettings(t *testing.T) {
	dir := t.TempDir()
	bigIDs := filepath.Join(dir, "big")
	writeDataset(t, bigIDs, []int32{1, 2, 9000, 3}) // id 9000 ≥ the 8192 ids of gosource-bpe
	unknownKey := filepath.Join(dir, "unknown.json")
	require.NoError(t, os.WriteFile(unknownKey, []byte(`{"num-layers": 2, "num-leyers": 3}`), 0o644))

	cases := []struct {
		name string
		args []string
		env  map[string]string
		want []string // substrings of the error
	}{
		{"ranks not divisible", []string{"--ranks", "3", "--tensor-model-parallel-size", "2"},
			nil, []string{"3 ranks do not divide into TP=2 × PP=1"}},
		{"heads not divisible by TP", []string{"--ranks", "2", "--tensor-model-parallel-size", "2", "--num-attention-heads", "3", "--hidden-size", "33"},
			nil, []string{"--num-attention-heads 3 is not divisible by --tensor-model-parallel-size 2"}},
		{"hidden not divisible by heads", []string{"--hidden-size", "30"},
			nil, []string{"--hidden-size 30 is not divisible by --num-attention-heads 4"}},
		{"layers not divisible by PP", []string{"--ranks", "2", "--pipeline-model-parallel-size", "2", "--num-layers", "3"},
			nil, []string{"--num-layers 3 is not divisible by --pipeline-model-parallel-size 2"}},
		{"virtual stages without PP", []string{"--num-layers-per-virtual-pipeline-stage", "1"},
			nil, []string{"needs --pipeline-model-parallel-size of at least 2"}},
		{"interleaving needs enough micro-batches", []string{"--ranks", "2", "--pipeline-model-parallel-size", "2",
			"--num-layers-per-virtual-pipeline-stage", "1", "--global-batch-size", "8", "--micro-batch-size", "8"},
			nil, []string{"interleaved schedule", "micro-batches per iteration"}},
		{"global batch", []string{"--ranks", "2", "--global-batch-size", "12", "--micro-batch-size", "4"},
			nil, []string{"--global-batch-size 12 is not a multiple of micro-batch size 4 × DP 2"}},
		{"sequence longer than positions", []string{"--seq-length", "256", "--max-position-embeddings", "128"},
			nil, []string{"--max-position-embeddings 128 is less than --seq-length 256"}},
		{"missing data", []string{"--data-path", filepath.Join(dir, "missing")},
			nil, []string{"--data-path", "missing.idx"}},
		{"blend weights", []string{"--data-path", "0.5", bigIDs, "x"},
			nil, []string{"--data-path", "weight-prefix pairs"}},
		{"vocabulary does not match the data", []string{"--data-path", bigIDs},
			nil, []string{"holds token id 9000", "8192 ids", "another vocabulary"}},
		{"unknown config key", []string{"--config", unknownKey},
			nil, []string{`unknown key "num-leyers"`}},
		{"missing config file", []string{"--config", filepath.Join(dir, "none.json")},
			nil, []string{"--config", "none.json"}},
		{"unknown flag", []string{"--num-layer", "2"},
			nil, []string{"flag provided but not defined: -num-layer", "-help"}},
		{"bf16 and fp16", []string{"--bf16", "--fp16"},
			nil, []string{"--bf16 and --fp16 are exclusive"}},
		{"nccl", []string{"--distributed-backend", "nccl"},
			nil, []string{"--distributed-backend nccl requires --device cuda"}},
		{"unknown device", []string{"--device", "tpu"},
			nil, []string{`--device "tpu": want one of [`, "cuda"}},
		{"recompute", []string{"--recompute-granularity", "some"},
			nil, []string{`--recompute-granularity "some"`}},
		{"decay style", []string{"--lr-decay-style", "cosin"},
			nil, []string{`--lr-decay-style "cosin"`}},
		{"warmup twice", []string{"--lr-warmup-iters", "5", "--lr-warmup-fraction", "0.1"},
			nil, []string{"exclusive"}},
		{"ranks under a launcher", []string{"--ranks", "2"},
			map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1", "MEGAGO_JOB_TOKEN": "x"},
			[]string{"--ranks 2 cannot be used under a launcher"}},
		{"several at once", []string{"--bf16", "--fp16", "--distributed-backend", "nccl"},
			nil, []string{"invalid settings:", "exclusive", "cuda"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			args := append([]string{"--cache-dir", testCache, "--out-dir", out}, tc.args...)
			var stdout bytes.Buffer
			_, err := run(context.Background(), args, func(k string) string { return tc.env[k] }, &stdout, io.Discard)
			require.Error(t, err)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
			assert.NoDirExists(t, out, "no work started")
			assert.NotContains(t, stdout.String(), "iter ")
		})
	}
}

// writeDataset writes an indexed dataset of one document holding ids.
func writeDataset(t *testing.T, prefix string, ids []int32) {
	t.Helper()
	b, err := data.NewIndexedBuilder(prefix, data.Int32)
	require.NoError(t, err)
	require.NoError(t, b.AddDocument(ids, []int{len(ids)}))
	require.NoError(t, b.Finalize())
}

func TestConfigFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "gpt.json")
	require.NoError(t, os.WriteFile(file, []byte(`{
		"num_layers": 6,
		"hidden-size": 96,
		"lr": 3e-4,
		"bf16": true,
		"data-path": ["0.3", "a", "0.7", "b"],
		"split": "98,2,0"
	}`), 0o644))
	c, err := parseConfig([]string{"--config", file, "--hidden-size", "64"}, 0, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 6, c.NumLayers, "underscores name flags too")
	assert.Equal(t, 64, c.HiddenSize, "flags override the file")
	assert.Equal(t, 3e-4, c.LR)
	assert.True(t, c.BF16)
	assert.Equal(t, "98,2,0", c.Split)
	prefixes, weights, err := c.Blend()
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "b"}, prefixes)
	assert.Equal(t, []float64{0.3, 0.7}, weights)
	assert.Equal(t, 4, c.NumAttentionHeads, "defaults stay")
}

func TestConfigFileBadValue(t *testing.T) {
	file := filepath.Join(t.TempDir(), "gpt.json")
	require.NoError(t, os.WriteFile(file, []byte(`{"num-layers": "four"}`), 0o644))
	_, err := parseConfig([]string{"--config", file}, 0, io.Discard)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `key "num-layers"`)
}

// TestDataPathMegatronStyle: --data-path takes Megatron's list of words.
func TestDataPathMegatronStyle(t *testing.T) {
	for _, args := range [][]string{
		{"--data-path", "0.3", "a", "0.7", "b", "--seed", "7"},
		{"--data-path", "0.3 a 0.7 b", "--seed", "7"},
		{"--data-path", "0.3", "a", "--data-path", "0.7", "b", "--seed", "7"},
	} {
		c, err := parseConfig(args, 0, io.Discard)
		require.NoError(t, err, strings.Join(args, " "))
		prefixes, weights, err := c.Blend()
		require.NoError(t, err)
		assert.Equal(t, []string{"a", "b"}, prefixes)
		assert.Equal(t, []float64{0.3, 0.7}, weights)
		assert.Equal(t, uint64(7), c.Seed)
	}
}

func TestHelp(t *testing.T) {
	var out bytes.Buffer
	_, err := run(context.Background(), []string{"-help"}, noEnv, &out, io.Discard)
	assert.ErrorIs(t, err, errHelp)
	for _, f := range []string{"--tensor-model-parallel-size", "--data-path", "--config", "--ranks"} {
		assert.Contains(t, out.String(), strings.TrimPrefix(f, "-"))
	}
}

// TestFLOPsFormula checks flopsPerIteration against BENCHMARKS.md's W2 row: L=4, C=256,
// V=8192, batch 8 × 256: 70.87 model GFLOP per step.
func TestFLOPsFormula(t *testing.T) {
	c, err := parseConfig([]string{"--num-layers", "4", "--hidden-size", "256", "--seq-length", "256",
		"--micro-batch-size", "8"}, 0, io.Discard)
	require.NoError(t, err)
	assert.InDelta(t, 70.87e9, c.flopsPerIteration(c.modelConfig(8192)), 0.01e9)
}
