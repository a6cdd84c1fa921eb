package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"megago/examples/internal/report"
)

// mainEnv makes the test binary run main instead of the tests, so the launch test can
// start it as the example program.
const mainEnv = "MEGAGO_BERT_EXAMPLE_MAIN"

// testCache is the cache directory the tests share: the default corpus is tokenized
// once per test run.
var testCache string

func TestMain(m *testing.M) {
	if os.Getenv(mainEnv) == "1" {
		main()
		os.Exit(0)
	}
	dir, err := os.MkdirTemp("", "megago-bert-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testCache = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// tinyArgs is a model small enough for tests, on the default corpus, writing into a
// temporary directory; extra flags follow (and override).
func tinyArgs(t *testing.T, extra ...string) []string {
	t.Helper()
	args := []string{"--cache-dir", testCache, "--out-dir", t.TempDir(),
		"--num-layers", "2", "--hidden-size", "32", "--num-attention-heads", "4", "--seq-length", "32",
		"--micro-batch-size", "4", "--global-batch-size", "8", "--train-iters", "6", "--lr", "5e-3",
		"--lr-warmup-iters", "1", "--eval-iters", "2", "--eval-interval", "3", "--log-interval", "1",
		"--fill-text", tinyFill, "--fill-line", "1"}
	return append(args, extra...)
}

// tinyFill is a --fill-text that fits the tests' 32 tokens.
const tinyFill = "x := 1\ny := x + 1\nreturn y\n"

// noEnv is an empty environment: no launcher.
func noEnv(string) string { return "" }

// runTiny runs the program in-process and returns its summary and output.
func runTiny(t *testing.T, args []string) (*summary, string) {
	t.Helper()
	var out bytes.Buffer
	sum, err := run(context.Background(), args, noEnv, &out, io.Discard)
	require.NoError(t, err, "output:\n%s", out.String())
	return sum, out.String()
}

func mean(v []float64) float64 {
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

// TestTinyRunLearns: the loss falls, validation reports both tasks beside their
// baselines, the masked line is filled in, and the files are written.
func TestTinyRunLearns(t *testing.T) {
	args := tinyArgs(t, "--train-iters", "24", "--eval-interval", "12")
	sum, out := runTiny(t, args)
	require.Equal(t, 24, sum.Iterations)
	t.Logf("training losses %.3f", sum.Losses)
	// From ln 8196 + ln 2 ≈ 9.7, the loss falls by more than a nat in 24 iterations.
	assert.Less(t, mean(sum.Losses[20:]), sum.Losses[0]-1)
	v := sum.Valid
	require.NotNil(t, v)
	assert.Equal(t, 2.0*2, v.Micro, "--eval-iters 2 global batches of 2 micro-batches")
	assert.Equal(t, 2.0*8, v.Pairs)
	assert.Greater(t, v.Masked, v.Pairs, "about 15% of 32 tokens masked per sample")
	// The counts behind the baselines, recounted from the validation split's first
	// --eval-iters × --global-batch-size samples: the masked tokens, and the swapped pairs,
	// of which the SOP baseline (always predicting the majority order) takes the larger
	// side. Both orders occur, so the baseline is below 1.
	masked, swapped := validationCounts(t, args)
	assert.Equal(t, masked, v.Masked, "masked tokens")
	assert.Equal(t, swapped, v.Swp, "swapped pairs")
	require.True(t, swapped > 0 && swapped < v.Pairs, "%v of %v pairs swapped: the SOP baseline is trivial", swapped, v.Pairs)
	assert.Equal(t, max(swapped, v.Pairs-swapped)/v.Pairs, v.SOPBaselineAccuracy())
	assert.Less(t, v.LM(), sum.Losses[0])
	for _, want := range []string{"sentence order prediction", "iter 24/24", "validation at iteration 12",
		"| MLM accuracy", "| SOP accuracy", "done: 24 iterations", "of always predicting the most frequent token",
		"filled in line 1 of --fill-text"} {
		assert.Contains(t, out, want)
	}
	outDir := args[3]
	recs, err := report.ReadRecords(filepath.Join(outDir, "metrics.jsonl"))
	require.NoError(t, err)
	assert.Equal(t, sum.Losses, report.Losses(recs, "train", "loss"))
	assert.Equal(t, []float64{v.MLMAccuracy()}, report.Losses(recs, "valid", "mlm_accuracy")[1:])
	assert.FileExists(t, filepath.Join(outDir, "loss.png"))
}

// validationCounts returns the masked tokens and the swapped sentence pairs of the
// samples a validation run of args scores: the first --eval-iters global batches of the
// validation split.
func validationCounts(t *testing.T, args []string) (masked, swapped float64) {
	t.Helper()
	cfg, err := parseConfig(args, 0, io.Discard)
	require.NoError(t, err)
	corp, err := loadData(context.Background(), cfg, true, io.Discard)
	require.NoError(t, err)
	defer corp.Close()
	for i := range cfg.EvalIters * cfg.GlobalBatchSize {
		s := corp.valid.Sample(i)
		for _, m := range s.LossMask {
			masked += float64(m)
		}
		swapped += float64(s.IsRandom)
	}
	return masked, swapped
}

// TestNoBinaryHead: --bert-no-binary-head trains MLM alone.
func TestNoBinaryHead(t *testing.T) {
	sum, out := runTiny(t, tinyArgs(t, "--bert-no-binary-head", "--train-iters", "3", "--fill-text", ""))
	assert.Zero(t, sum.Valid.Pairs)
	assert.NotContains(t, out, "SOP accuracy")
	assert.InDelta(t, sum.Valid.LM(), sum.Valid.Loss(), 0)
}

// layoutTol bounds the loss difference between layouts after a few AdamW steps: TP
// all-reduces, the vocabulary-parallel cross entropy and DP averaging reorder float32
// sums (relative error ~1e-7 per op), which Adam's m/√v normalization lets grow over
// steps; post-LN's layer norms of a residual sum amplify it a little more than GPT's.
const layoutTol = 2e-3

var (
	refOnce sync.Once
	ref     *summary
)

// reference returns the one-rank run of tinyArgs that layouts are compared with.
func reference(t *testing.T) *summary {
	t.Helper()
	refOnce.Do(func() { ref, _ = runTiny(t, tinyArgs(t)) })
	require.NotNil(t, ref, "the one-rank reference run failed")
	return ref
}

// TestLayoutsMatchOneRank trains the same model with the same global batch on one rank
// and on TP=2, DP=2 and PP=2 goroutine layouts: the samples, initial weights and dropout
// are keyed by global coordinates, so only the order of float sums differs.
func TestLayoutsMatchOneRank(t *testing.T) {
	want := reference(t)
	for _, layout := range [][]string{
		{"--ranks", "2", "--tensor-model-parallel-size", "2", "--sequence-parallel"},
		{"--ranks", "2"},
		{"--ranks", "2", "--pipeline-model-parallel-size", "2"},
	} {
		t.Run(strings.Join(layout, " "), func(t *testing.T) {
			got, out := runTiny(t, tinyArgs(t, layout...))
			assert.InDeltaSlice(t, want.Losses, got.Losses, layoutTol, "training losses")
			assert.InDelta(t, want.Valid.Loss(), got.Valid.Loss(), layoutTol, "validation loss")
			assert.InDelta(t, want.Valid.MLMCorrect, got.Valid.MLMCorrect, 1, "masked tokens predicted (one may flip)")
			assert.Equal(t, want.Valid.Masked, got.Valid.Masked)
			assert.Contains(t, out, "layout: 2 rank(s)")
			assert.Equal(t, want.Filled, got.Filled, "the masked line is filled in the same")
		})
	}
}
