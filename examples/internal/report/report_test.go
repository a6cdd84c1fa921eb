package report

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"megago/internal/plot"
	"megago/optim"
	"megago/train"
)

// TestRecordKeepsOrder: a Record's keys come out in the order given, and non-finite
// numbers as null; encoding/json reads it back.
func TestRecordKeepsOrder(t *testing.T) {
	b, err := json.Marshal(Record{{"kind", "train"}, {"b", 1}, {"a", 0.5}, {"inf", math.Inf(1)}, {"nan", math.NaN()}})
	require.NoError(t, err)
	assert.Equal(t, `{"kind":"train","b":1,"a":0.5,"inf":null,"nan":null}`, string(b))
}

// TestReportFiles runs a Report through three iterations and a validation run and reads
// back what it wrote.
func TestReportFiles(t *testing.T) {
	dir := t.TempDir()
	var out bytes.Buffer
	r, err := New(&out, Options{OutDir: dir, Iters: 3, LogInterval: 2, TokensPerIter: 100, FLOPsPerIter: 1e9, Ranks: 2,
		Model: "BERT", LossKey: "loss", LossTag: "total loss"})
	require.NoError(t, err)
	losses := []float64{4, 3, 2.5}
	for i, l := range losses {
		r.Step(i+1, train.StepResult{Loss: l, StepResult: optim.StepResult{LR: 1e-3, GradNorm: 1, LossScale: 1}}, 100*time.Millisecond, nil)
	}
	r.Eval(3, 2.25, Value{"lm loss", "%.4f", "lm_loss", "lm loss validation", 2.25},
		Value{"accuracy", "%.3f", "accuracy", "", 0.5})
	r.Reference(3, "reference 3")
	r.Done(3, time.Second)
	r.Files()
	require.NoError(t, r.Close())

	text := out.String()
	for _, want := range []string{"iter 2/3 | loss 3.5000 | lr 1.000e-03", "1,000 tok/s", "iter 3/3 | loss 2.5000",
		"validation at iteration 3 | lm loss 2.2500 | accuracy 0.500\n", "done: 3 iterations in 0:01 (300 tokens, 300 tok/s overall)"} {
		assert.Contains(t, text, want)
	}
	recs, err := ReadRecords(filepath.Join(dir, "metrics.jsonl"))
	require.NoError(t, err)
	assert.Equal(t, losses, Losses(recs, "train", "loss"))
	assert.Equal(t, []float64{0.5}, Losses(recs, "valid", "accuracy"))
	assert.Equal(t, 300.0, recs[2]["tokens"])

	events, _ := filepath.Glob(filepath.Join(dir, "tensorboard", "events.out.tfevents.*"))
	require.Len(t, events, 1)
	_, scalars, err := ReadEvents(events[0])
	require.NoError(t, err)
	tags := map[string]int{}
	for _, s := range scalars {
		tags[s.Tag]++
	}
	assert.Equal(t, map[string]int{"total loss": 3, "learning-rate": 3, "grad-norm": 3, "loss-scale": 3, "throughput": 3,
		"lm loss validation": 1}, tags)

	img, err := plot.ReadPNG(filepath.Join(dir, "loss.png"))
	require.NoError(t, err)
	assert.Equal(t, PlotW, img.Bounds().Dx())
	assert.True(t, strings.HasSuffix(r.Dir(), filepath.Base(dir)))
}

// A nil Report (every rank but 0) does nothing.
func TestNilReport(t *testing.T) {
	var r *Report
	r.Printf("x")
	assert.NoError(t, r.Step(1, train.StepResult{}, time.Second, nil))
	r.Eval(1, 0)
	r.Done(1, time.Second)
	assert.NoError(t, r.Err())
	assert.NoError(t, r.Close())
	assert.Zero(t, r.Consumed())
}

// TestWriteErrors: a failed write of metrics.jsonl (a full disk: /dev/full) is returned
// by the first Step, not only when the file is closed, and kept for Err; validation
// records report theirs through Err.
func TestWriteErrors(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("needs /dev/full")
	}
	for _, what := range []string{"step", "eval"} {
		t.Run(what, func(t *testing.T) {
			dir := t.TempDir()
			metrics := filepath.Join(dir, "metrics.jsonl")
			require.NoError(t, os.Symlink("/dev/full", metrics))
			r, err := New(io.Discard, Options{OutDir: dir, Iters: 3, LogInterval: 2, TokensPerIter: 1, Ranks: 1})
			require.NoError(t, err)
			want := "writing " + metrics + ": write " + metrics + ": no space left on device"
			if what == "step" {
				assert.EqualError(t, r.Step(1, train.StepResult{Loss: 1}, time.Second, nil), want)
			} else {
				r.Eval(1, 1, Value{Label: "loss", Format: "%.1f", Key: "loss", V: 1})
			}
			assert.EqualError(t, r.Err(), want)
			assert.Error(t, r.Close())
		})
	}
}
