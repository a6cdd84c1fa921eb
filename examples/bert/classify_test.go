package main

import (
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"megago/examples/internal/report"
)

// TestFinetuneClassify pretrains a tiny BERT with --save, then fine-tunes it with
// --finetune-classify --load on one rank and on TP=2 and PP=2 layouts: validation reports
// the accuracy beside the majority class's share on balanced classes, and the layouts
// follow the one-rank run (the checkpoint is resharded on loading). That the classifier
// learns is shown by the default run in the README (a tiny model does not, in a test's
// few steps).
func TestFinetuneClassify(t *testing.T) {
	dir := t.TempDir()
	_, out := runTiny(t, tinyArgs(t, "--train-iters", "2", "--eval-iters", "0", "--fill-text", "", "--save", dir))
	require.Contains(t, out, "checkpoint: saved iteration 2")

	tune := func(extra ...string) (*summary, string) {
		args := append([]string{"--cache-dir", testCache, "--out-dir", t.TempDir(), "--finetune-classify", "--load", dir,
			"--seq-length", "32", "--micro-batch-size", "4", "--global-batch-size", "8", "--train-iters", "40", "--hidden-dropout", "0",
			"--lr", "5e-3", "--lr-warmup-iters", "1", "--eval-iters", "2", "--eval-interval", "20", "--log-interval", "10"}, extra...)
		return runTiny(t, args)
	}
	one, out := tune()
	require.Equal(t, 40, one.Iterations)
	for _, l := range one.Losses { // a model this small barely moves from ln 4 in 40 steps
		assert.InDelta(t, math.Log(4), l, 0.2, "the loss of 4 balanced classes")
	}
	v := one.Classify
	require.NotNil(t, v)
	assert.Equal(t, 16.0, v.Samples, "--eval-iters 2 global batches of 8")
	assert.InDelta(t, v.Samples, v.PerClass[0]+v.PerClass[1]+v.PerClass[2]+v.PerClass[3], 0)
	assert.Equal(t, 0.25, v.Baseline(), "4 classes, balanced")
	for _, want := range []string{"which of 4 packages a snippet", "model: the BERT of " + dir, "validation at iteration 40 | loss",
		"| accuracy", "| majority baseline", "classification accuracy"} {
		assert.Contains(t, out, want)
	}
	recs, err := report.ReadRecords(filepath.Join(argValue(t, out), "metrics.jsonl"))
	require.NoError(t, err)
	assert.Equal(t, one.Losses, report.Losses(recs, "train", "loss"))

	for _, layout := range [][]string{
		{"--ranks", "2", "--tensor-model-parallel-size", "2"},
		{"--ranks", "2", "--pipeline-model-parallel-size", "2"},
	} {
		got, _ := tune(layout...)
		assert.InDeltaSlice(t, one.Losses, got.Losses, layoutTol, "%v", layout)
		assert.Equal(t, v.Samples, got.Classify.Samples)
	}
}

// argValue returns the output directory a run's output names ("output in DIR").
func argValue(t *testing.T, out string) string {
	t.Helper()
	const marker = "; output in "
	for _, line := range strings.Split(out, "\n") {
		if i := strings.Index(line, marker); i >= 0 {
			return line[i+len(marker):]
		}
	}
	t.Fatalf("no %q in the output", marker)
	return ""
}
