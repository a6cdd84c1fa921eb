package main

import (
	"context"
	"io"
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"megago/checkpoint"
	"megago/data"
)

// --no-load-optim resumes the weights and the data position with a new optimizer: the
// first loss after resuming is the straight run's (it is computed before any update, from
// the loaded weights, on the next batch), the next one is not (Adam's moments and the
// learning-rate schedule start again, as in Megatron). --no-load-rng resumes a checkpoint
// of another --seed, which is otherwise refused.
func TestNoLoadOptimAndRNG(t *testing.T) {
	straight, _ := runTiny(t, ckptArgs(t, "--train-iters", "5"))
	dir := t.TempDir()
	runTiny(t, ckptArgs(t, "--train-iters", "3", "--save", dir, "--eval-iters", "0"))

	resumed, out := runTiny(t, ckptArgs(t, "--train-iters", "5", "--load", dir, "--no-load-optim", "--eval-iters", "0"))
	assert.Contains(t, out, "resumed (with a new optimizer, --no-load-optim) from "+dir+", iteration 3")
	require.Len(t, resumed.Losses, 2)
	assert.Equal(t, straight.Losses[3], resumed.Losses[0], "the loaded weights on the straight run's 4th batch")
	assert.NotEqual(t, straight.Losses[4], resumed.Losses[1], "a new optimizer makes another update")

	_, err := run(context.Background(), ckptArgs(t, "--train-iters", "5", "--load", dir, "--seed", "7"), noEnv, io.Discard, io.Discard)
	assert.ErrorContains(t, err, "resume it with the same seed, or give --no-load-rng")
	reseeded, _ := runTiny(t, ckptArgs(t, "--train-iters", "4", "--load", dir, "--seed", "7", "--no-load-rng", "--eval-iters", "0"))
	assert.Len(t, reseeded.Losses, 1)
}

// A sample-based run with a batch-size ramp-up: --rampup-batch-size 4 4 8 with a
// global batch of 8 gives batches 4, 4, 8, 8 for --train-samples 24 (Megatron's
// update_train_iters: 3 iterations up to 16 samples, then one whole batch), and the
// checkpoint records the 24 samples consumed. The first iteration is the first of a run
// with a constant global batch of 4 (the same samples, the same weights).
func TestRampupRun(t *testing.T) {
	dir := t.TempDir()
	args := tinyArgs(t, "--train-iters", "0", "--global-batch-size", "8", "--train-samples", "24",
		"--rampup-batch-size", "4", "4", "8", "--lr-warmup-iters", "0", "--lr-warmup-samples", "4",
		"--eval-iters", "1", "--eval-interval", "0", "--gen-tokens", "0", "--save", dir)
	args = dropFlag(dropFlag(args, "--train-iters"), "--lr-warmup-iters")
	sum, out := runTiny(t, args)
	assert.Equal(t, 4, sum.Iterations)
	assert.Contains(t, out, "settings that differ from Megatron-LM's defaults")
	m, err := checkpoint.ReadManifest(filepath.Join(dir, "iter_0000004"))
	require.NoError(t, err)
	assert.Equal(t, 24, m.ConsumedSamples)

	constant, _ := runTiny(t, tinyArgs(t, "--train-iters", "1", "--lr-warmup-iters", "0", "--eval-iters", "0", "--gen-tokens", "0"))
	assert.Equal(t, constant.Losses[0], sum.Losses[0])
}

// dropFlag returns args without flag and its value.
func dropFlag(args []string, flag string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		if args[i] == flag {
			i++
			continue
		}
		out = append(out, args[i])
	}
	return out
}

// --mock-data trains on Megatron-style mock documents (ids 1, 2, 3, ..., EOD), with no
// file read: every loss is finite, and the validation loss too.
func TestMockData(t *testing.T) {
	sum, out := runTiny(t, tinyArgs(t, "--mock-data", "--gen-tokens", "0"))
	assert.Contains(t, out, "--mock-data: 200 generated documents")
	require.Len(t, sum.Losses, 6)
	for _, l := range append(sum.Losses, sum.ValidLoss) {
		assert.False(t, math.IsNaN(l) || math.IsInf(l, 0), "loss %v", l)
	}
}

// --train-data-path and --valid-data-path give each split its own datasets, used
// whole: the validation loss of a run whose validation path is its training path is
// computed on those same documents.
func TestSplitDataPaths(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, seed uint64) string {
		prefix := filepath.Join(dir, name)
		b, err := data.NewIndexedBuilder(prefix, data.Int32)
		require.NoError(t, err)
		r := rand.New(rand.NewPCG(seed, 0))
		for range 40 {
			doc := make([]int32, 50)
			for i := range doc {
				doc[i] = r.Int32N(100)
			}
			require.NoError(t, b.AddDocument(doc, []int{len(doc)}))
		}
		require.NoError(t, b.Finalize())
		return prefix
	}
	a, v := write("a", 1), write("v", 2)
	sum, out := runTiny(t, tinyArgs(t, "--train-data-path", a, "--valid-data-path", v, "--train-iters", "2", "--gen-tokens", "0"))
	assert.Contains(t, out, "--train-data-path "+a+", --valid-data-path "+v)
	assert.Equal(t, 2, sum.Iterations)
	_, err := run(context.Background(), tinyArgs(t, "--train-data-path", a), noEnv, io.Discard, io.Discard)
	assert.ErrorContains(t, err, "--train-data-path without --valid-data-path")
}
