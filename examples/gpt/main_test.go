package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"megago/data"
)

// mainEnv makes the test binary run main instead of the tests, so the launch test can
// start it as the example program (see TestLaunchMatchesOneRank).
const mainEnv = "MEGAGO_GPT_EXAMPLE_MAIN"

// testCache is the cache directory the tests share: the default corpus is tokenized
// once per test run.
var testCache string

func TestMain(m *testing.M) {
	if os.Getenv(mainEnv) == "1" {
		main()
		os.Exit(0)
	}
	dir, err := os.MkdirTemp("", "megago-gpt-test-")
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
		"--num-layers", "4", "--hidden-size", "32", "--num-attention-heads", "4", "--seq-length", "32",
		"--micro-batch-size", "2", "--global-batch-size", "4", "--train-iters", "6", "--lr", "1e-2",
		"--lr-warmup-iters", "1", "--eval-iters", "1", "--eval-interval", "3", "--log-interval", "1",
		"--gen-tokens", "4"}
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
	assert.Less(t, last, first-1, "the loss falls by more than a nat in 12 iterations (from ln 8192 ≈ 9.01)")
	assert.False(t, sum.Interrupted)
	assert.Less(t, sum.ValidLoss, first)
	assert.Greater(t, sum.Entropy, 4.0, "unigram entropy of Go source tokens")
	for _, want := range []string{"unigram entropy", "iter 12/12", "validation at iteration 6", "validation at iteration 12",
		"TFLOP/s", "ETA", "done: 12 iterations", "generated from the prompt"} {
		assert.Contains(t, out, want)
	}
	outDir := args[3]
	for _, f := range []string{"metrics.jsonl", "loss.png"} {
		assert.FileExists(t, filepath.Join(outDir, f))
	}
	recs := readMetrics(t, filepath.Join(outDir, "metrics.jsonl"))
	assert.Equal(t, sum.Losses, recs.train)
	assert.Len(t, recs.valid, 2)
}

func mean(v []float64) float64 {
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

// metrics is what a metrics.jsonl file holds: the training and validation losses, and
// the gradient norm of each training iteration.
type metrics struct{ train, valid, gradNorm []float64 }

func readMetrics(t *testing.T, path string) metrics {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var m metrics
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var rec struct {
			Kind     string  `json:"kind"`
			Loss     float64 `json:"lm_loss"`
			GradNorm float64 `json:"grad_norm"`
		}
		require.NoError(t, json.Unmarshal(sc.Bytes(), &rec), sc.Text())
		switch rec.Kind {
		case "train":
			m.train, m.gradNorm = append(m.train, rec.Loss), append(m.gradNorm, rec.GradNorm)
		case "valid":
			m.valid = append(m.valid, rec.Loss)
		}
	}
	require.NoError(t, sc.Err())
	return m
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
		{"--ranks", "4", "--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2"},
		{"--ranks", "4", "--tensor-model-parallel-size", "2", "--sequence-parallel", "--use-distributed-optimizer"},
		{"--ranks", "2", "--pipeline-model-parallel-size", "2", "--num-layers-per-virtual-pipeline-stage", "1",
			"--recompute-granularity", "full"},
	} {
		t.Run(strings.Join(layout, " "), func(t *testing.T) { matchesOneRank(t, ref, layout) })
	}
}

// matchesOneRank runs tinyArgs at layout and compares its training and validation
// losses with ref's, one rank's; it returns the run's output, which must hold the
// generated text.
func matchesOneRank(t *testing.T, ref *summary, layout []string) string {
	t.Helper()
	got, out := runTiny(t, tinyArgs(t, layout...))
	assert.InDeltaSlice(t, ref.Losses, got.Losses, layoutTol, "training losses")
	t.Logf("largest training-loss difference to one rank: %.2g", maxDiff(ref.Losses, got.Losses))
	assert.InDelta(t, ref.ValidLoss, got.ValidLoss, layoutTol, "validation loss")
	assert.Contains(t, out, "generated from the prompt")
	return out
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

// TestInterruptStopsEveryRank cancels the context (as Ctrl-C does) once iteration 2 is
// reported: every rank stops after the same iteration and the run returns cleanly.
func TestInterruptStopsEveryRank(t *testing.T) {
	for _, ranks := range []string{"1", "2"} {
		t.Run("ranks="+ranks, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			w := &cancelOn{lines: 2, cancel: cancel}
			args := tinyArgs(t, "--ranks", ranks, "--pipeline-model-parallel-size", ranks, "--train-iters", "50")
			sum, err := run(ctx, args, noEnv, w, io.Discard)
			require.NoError(t, err, w.String())
			assert.True(t, sum.Interrupted)
			assert.GreaterOrEqual(t, sum.Iterations, 2)
			assert.Less(t, sum.Iterations, 50)
			out := w.String()
			assert.True(t, strings.Contains(out, "interrupted: stopping after iteration"), "the interruption is reported")
			assert.False(t, strings.Contains(out, "generated from the prompt"), "no generation after an interruption")
		})
	}
}

// cancelOn calls cancel once lines progress lines ("iter ...", or rank 0's "[rank 0] iter
// ...") were written to it.
type cancelOn struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	lines  int
	cancel func()
}

func (c *cancelOn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.buf.Write(p)
	if strings.HasPrefix(strings.TrimPrefix(string(p), "[rank 0] "), "iter ") { // launch.Run prefixes the ranks' lines
		if c.lines--; c.lines == 0 {
			c.cancel()
		}
	}
	return len(p), nil
}

func (c *cancelOn) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String()
}

// TestMixedPrecision: bf16 and fp16 (with dynamic loss scaling) train too.
func TestMixedPrecision(t *testing.T) {
	for _, flag := range []string{"--bf16", "--fp16"} {
		t.Run(flag, func(t *testing.T) {
			out := t.TempDir()
			sum, text := runTiny(t, tinyArgs(t, flag, "--out-dir", out, "--train-iters", "5", "--initial-loss-scale", "1024"))
			assert.Contains(t, text, map[string]string{"--bf16": "bfloat16", "--fp16": "float16"}[flag])
			assert.Less(t, mean(sum.Losses[3:]), sum.Losses[0]-0.2, "the loss falls")
			assert.False(t, math.IsNaN(sum.ValidLoss))
		})
	}
}

func maxDiff(a, b []float64) float64 {
	d := 0.0
	for i := range min(len(a), len(b)) {
		d = math.Max(d, math.Abs(a[i]-b[i]))
	}
	return d
}

// TestOwnDataBlend trains on two datasets of one's own, blended with Megatron's
// weight-prefix syntax (--data-path 0.7 A 0.3 B).
func TestOwnDataBlend(t *testing.T) {
	dir := t.TempDir()
	tok := data.GoSourceBPE()
	var prefixes []string
	for i, file := range []string{"strings/strings.go", "bytes/bytes.go"} {
		b, err := os.ReadFile(filepath.Join(runtime.GOROOT(), "src", file))
		if err != nil {
			t.Skipf("needs the Go sources: %v", err)
		}
		prefix := filepath.Join(dir, fmt.Sprint("part", i))
		writeDataset(t, prefix, tok.Encode(string(b)))
		prefixes = append(prefixes, prefix)
	}
	sum, out := runTiny(t, tinyArgs(t, "--data-path", "0.7", prefixes[0], "0.3", prefixes[1], "--split", "1,0,0",
		"--eval-iters", "0", "--train-iters", "3"))
	assert.Equal(t, 3, sum.Iterations)
	assert.Contains(t, out, "data: --data-path 0.7 "+prefixes[0]+" 0.3 "+prefixes[1])
}

// TestOverlapFlagsBitIdentical: Megatron's overlap flags change when the data-parallel
// collectives run, not what they compute. With the distributed optimizer and several
// buckets, --overlap-grad-reduce --overlap-param-gather train exactly as without them:
// the same losses, validation loss, generated text and saved weights (a checkpoint
// saved at iteration 3 while the gather of its update is pending).
func TestOverlapFlagsBitIdentical(t *testing.T) {
	dirs := []string{t.TempDir(), t.TempDir()}
	base := []string{"--ranks", "2", "--use-distributed-optimizer", "--ddp-bucket-size", "5000", "--save-interval", "3"}
	want, _ := runTiny(t, tinyArgs(t, append(base, "--save", dirs[0])...))
	got, _ := runTiny(t, tinyArgs(t, append(base, "--save", dirs[1], "--overlap-grad-reduce", "--overlap-param-gather")...))
	assert.Equal(t, want.Losses, got.Losses, "training losses")
	assert.Equal(t, want.ValidLoss, got.ValidLoss, "validation loss")
	assert.Equal(t, want.Generated, got.Generated, "generated text")
	files, err := filepath.Glob(filepath.Join(dirs[0], "iter_0000003", "model*"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		a, err := os.ReadFile(f)
		require.NoError(t, err)
		b, err := os.ReadFile(filepath.Join(dirs[1], "iter_0000003", filepath.Base(f)))
		require.NoError(t, err)
		assert.True(t, bytes.Equal(a, b), "%s differs", filepath.Base(f))
	}
}
