package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"megago/data"
	"megago/examples/internal/report"
)

// testCache is the cache directory the tests share: the default corpus is tokenized
// once per test run.
var testCache string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "megago-t5-test-")
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
		"--decoder-seq-length", "16", "--micro-batch-size", "2", "--global-batch-size", "4", "--train-iters", "6",
		"--lr", "1e-2", "--lr-warmup-iters", "1", "--eval-iters", "2", "--eval-interval", "3", "--log-interval", "1"}
	return append(args, extra...)
}

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

func TestTinyRunLearns(t *testing.T) {
	args := tinyArgs(t, "--train-iters", "12", "--eval-interval", "6")
	sum, out := runTiny(t, args)
	require.Equal(t, 12, sum.Iterations)
	require.Len(t, sum.Losses, 12)
	first, last := sum.Losses[0], mean(sum.Losses[9:])
	assert.Less(t, last, first-1, "the loss falls by more than a nat in 12 iterations (from about ln 8293 ≈ 9.0)")
	assert.Less(t, sum.Valid.Loss, first)
	assert.Greater(t, sum.Valid.Spans, 0)
	assert.True(t, sum.Valid.Baseline > 0 && sum.Valid.Baseline < 1, "baseline %v", sum.Valid.Baseline)
	// A special id is never a span token: the argmax over all ids is right only where the
	// argmax over text tokens is the same token.
	assert.LessOrEqual(t, sum.Valid.AccuracyAny, sum.Valid.Accuracy)
	for _, want := range []string{"one sentence per", "span corruption: 30%", "iter 12/12", "validation at iteration 6",
		"validation at iteration 12", "span-token accuracy", "baseline", "done: 12 iterations", "the most frequent of them", "argmax over all ids",
		"corrupted (the encoder's input)", "<extra_id_0>", "greedy decoding", "filled in"} {
		assert.Contains(t, out, want)
	}
	outDir := args[3]
	for _, f := range []string{"metrics.jsonl", "loss.png"} {
		assert.FileExists(t, filepath.Join(outDir, f))
	}
	recs, err := report.ReadRecords(filepath.Join(outDir, "metrics.jsonl"))
	require.NoError(t, err)
	assert.Equal(t, sum.Losses, report.Losses(recs, "train", "lm_loss"))
	assert.Len(t, report.Losses(recs, "valid", "span_accuracy"), 2)
}

// TestFillShowsTheSample checks the filling's texts against the dataset: the original
// with its spans put back is the sample's source text, and the corrupted input is the
// encoder's tokens.
func TestFillShowsTheSample(t *testing.T) {
	cfg, err := parseConfig(tinyArgs(t, "--fill-sample", "3"), 0, io.Discard)
	require.NoError(t, err)
	corp, err := loadCorpus(context.Background(), cfg, true, io.Discard)
	require.NoError(t, err)
	defer corp.Close()
	sum, _ := runTiny(t, tinyArgs(t, "--fill-sample", "3", "--train-iters", "2"))
	require.NotNil(t, sum.Fill)
	ds := corp.valid.(*data.T5Dataset)
	unmark := strings.NewReplacer("«", "", "»", "")
	assert.Equal(t, corp.tok.Decode(ds.Source(3)), unmark.Replace(sum.Fill.Original))
	s := ds.Sample(3)
	n := 0
	for n < len(s.EncPaddingMask) && s.EncPaddingMask[n] == 1 {
		n++
	}
	assert.Equal(t, corp.tok.Decode(s.EncTokens[:n]), sum.Fill.Corrupted)
	assert.Greater(t, sum.Fill.Total, 0)
	assert.Equal(t, strings.Count(sum.Fill.Original, "«"), strings.Count(sum.Fill.Corrupted, "<extra_id_"))
}

// TestBaselineCountsSpanTokens recounts the validation span tokens from the samples:
// the labels that are neither sentinels nor EOS, and the most frequent of them.
func TestBaselineCountsSpanTokens(t *testing.T) {
	args := tinyArgs(t, "--train-iters", "2", "--fill-sample", "-1", "--ranks", "2") // DP=2 sums the counts
	cfg, err := parseConfig(args, 0, io.Discard)
	require.NoError(t, err)
	corp, err := loadCorpus(context.Background(), cfg, true, io.Discard)
	require.NoError(t, err)
	defer corp.Close()
	counts := map[int32]int{}
	total := 0
	sentinels := map[int32]bool{}
	for _, id := range corp.tok.Special().Sentinels {
		sentinels[id] = true
	}
	for i := range cfg.EvalIters * cfg.GlobalBatchSize {
		s := corp.valid.Sample(i)
		for j, l := range s.Labels {
			if s.LossMask[j] == 1 && !sentinels[l] && l != corp.tok.Special().EOS {
				counts[l]++
				total++
			}
		}
	}
	best := int32(-1)
	for id, n := range counts {
		if best < 0 || n > counts[best] || n == counts[best] && id < best {
			best = id
		}
	}
	sum, _ := runTiny(t, args)
	assert.Equal(t, total, sum.Valid.Spans)
	assert.Equal(t, best, sum.Valid.Frequent)
	assert.Equal(t, float64(counts[best])/float64(total), sum.Valid.Baseline)
}

// TestFillText fills the sentinels of text given on the command line.
func TestFillText(t *testing.T) {
	sum, out := runTiny(t, tinyArgs(t, "--train-iters", "2", "--fill-text", "if err != nil {\n\treturn <extra_id_0>\n}\n"))
	require.NotNil(t, sum.Fill)
	assert.Equal(t, "if err != nil {\n\treturn <extra_id_0>\n}\n", sum.Fill.Corrupted)
	assert.Empty(t, sum.Fill.Original)
	assert.NotContains(t, out, "its masked spans")
	assert.Contains(t, out, "filled in («» around the generated spans):")
}

func mean(v []float64) float64 {
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

// layoutTol bounds the loss difference between layouts after a few AdamW steps: TP
// all-reduces and DP averaging reorder float32 sums (relative error ~1e-7 per op), which
// Adam's m/√v normalization lets grow over steps.
const layoutTol = 2e-3

// TestLayoutsMatchOneRank trains the same model with the same global batch on one rank
// and on several in-process layouts, and compares the loss curves.
func TestLayoutsMatchOneRank(t *testing.T) {
	ref := reference(t)
	for _, layout := range [][]string{
		{"--ranks", "2", "--tensor-model-parallel-size", "2"},
		{"--ranks", "2"},
		{"--ranks", "4", "--tensor-model-parallel-size", "2", "--sequence-parallel", "--use-distributed-optimizer"},
	} {
		t.Run(strings.Join(layout, " "), func(t *testing.T) {
			got, out := runTiny(t, tinyArgs(t, layout...))
			assert.InDeltaSlice(t, ref.Losses, got.Losses, layoutTol, "training losses")
			t.Logf("largest training-loss difference to one rank: %.2g", maxDiff(ref.Losses, got.Losses))
			assert.InDelta(t, ref.Valid.Loss, got.Valid.Loss, layoutTol, "validation loss")
			assert.Equal(t, ref.Valid.Spans, got.Valid.Spans, "span tokens scored")
			assert.Equal(t, ref.Valid.Baseline, got.Valid.Baseline, "baseline")
			assert.Contains(t, out, "filled in")
		})
	}
}

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

func maxDiff(a, b []float64) float64 {
	d := 0.0
	for i := range min(len(a), len(b)) {
		d = math.Max(d, math.Abs(a[i]-b[i]))
	}
	return d
}

// Three iterations, --save, then --load and three more give the losses of six straight
// iterations (bit for bit on the same layout); --eval-only reports the saved model's
// validation score.
func TestCheckpointResume(t *testing.T) {
	args := func(extra ...string) []string {
		return tinyArgs(t, append([]string{"--lr-decay-iters", "6", "--fill-sample", "-1"}, extra...)...)
	}
	straight, _ := runTiny(t, args("--train-iters", "6"))
	dir := t.TempDir()
	first, out := runTiny(t, args("--train-iters", "3", "--save", dir))
	assert.Contains(t, out, "checkpoint: saved iteration 3")
	require.Equal(t, straight.Losses[:3], first.Losses)

	resumed, out := runTiny(t, args("--train-iters", "6", "--load", dir))
	assert.Contains(t, out, "checkpoint: resumed from "+dir+", iteration 3 (saved at TP 1 × PP 1 × DP 1)")
	assert.Equal(t, straight.Losses[3:], resumed.Losses)

	eval, out := runTiny(t, args("--load", dir, "--eval-only", "--ranks", "2", "--tensor-model-parallel-size", "2"))
	assert.InDelta(t, first.Valid.Loss, eval.Valid.Loss, layoutTol, "validation loss of the loaded model at TP=2")
	assert.Contains(t, out, "validation at iteration 3")
}
