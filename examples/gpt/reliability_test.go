package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"megago/examples/internal/report"
)

// divergeArgs are tinyArgs with fp16 and a learning rate of 1, which makes the loss NaN
// within a few iterations (the command, on the tiny model), saving every 2
// iterations to dir.
func divergeArgs(t *testing.T, dir string, extra ...string) []string {
	return tinyArgs(t, append([]string{"--fp16", "--lr", "1", "--initial-loss-scale", "1024", "--lr-warmup-iters", "0",
		"--lr-decay-style", "constant", "--save", dir, "--save-interval", "2", "--train-iters", "40",
		"--eval-iters", "0", "--gen-tokens", "0"}, extra...)...)
}

// latest returns the iteration latest_checkpointed_iteration.txt in dir names, 0 for none.
func latest(t *testing.T, dir string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "latest_checkpointed_iteration.txt"))
	if os.IsNotExist(err) {
		return 0
	}
	require.NoError(t, err)
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	return n
}

// trainRecords returns the "train" records of metrics.jsonl in out.
func trainRecords(t *testing.T, out string) []map[string]any {
	t.Helper()
	recs, err := report.ReadRecords(filepath.Join(out, "metrics.jsonl"))
	require.NoError(t, err)
	var train []map[string]any
	for _, r := range recs {
		if r["kind"] == "train" {
			train = append(train, r)
		}
	}
	return train
}

// TestDivergenceStops: a run whose loss turns NaN stops at that iteration with an
// error, and publishes no checkpoint of it; with the NaN check off, the fp16 loss
// scaler's skips stop it once a step is skipped at --min-loss-scale; weights that
// overflow are never saved.
func TestDivergenceStops(t *testing.T) {
	t.Run("loss NaN", func(t *testing.T) {
		dir, out := t.TempDir(), t.TempDir()
		_, err := run(context.Background(), divergeArgs(t, dir, "--out-dir", out), noEnv, io.Discard, io.Discard)
		require.Error(t, err)
		recs := trainRecords(t, out)
		require.NotEmpty(t, recs)
		last := recs[len(recs)-1]
		n := int(last["iteration"].(float64))
		assert.Nil(t, last["lm_loss"], "the last iteration's loss is NaN (null in metrics.jsonl)")
		for _, r := range recs[:len(recs)-1] {
			assert.NotNil(t, r["lm_loss"], "the loss is finite before iteration %d", n)
		}
		want := fmt.Sprintf("iteration %d: the training loss is NaN: stopping before this iteration is saved "+
			"(--no-check-for-nan-in-loss-and-grad turns this check off)", n)
		assert.Equal(t, want, err.Error())
		assert.Equal(t, (n-1)/2*2, latest(t, dir), "the latest checkpoint is the last one before the NaN loss")
	})

	t.Run("loss scale exhausted", func(t *testing.T) {
		dir, out := t.TempDir(), t.TempDir()
		_, err := run(context.Background(), divergeArgs(t, dir, "--out-dir", out, "--no-check-for-nan-in-loss-and-grad"),
			noEnv, io.Discard, io.Discard)
		require.Error(t, err)
		recs := trainRecords(t, out)
		first := -1
		for i, r := range recs {
			if r["skipped"] == true {
				first = i
				break
			}
		}
		require.GreaterOrEqual(t, first, 0, "some step is skipped")
		// Megatron's scaler: hysteresis 2 keeps 1024 for the first overflow, then every
		// overflow halves it down to the minimum 1, reached by the 12th skip; the run stops
		// when the next step at 1 overflows too: log2(1024/1) + 2 + 1 = 13 skips.
		const skips = 13
		require.Len(t, recs, first+skips, "the run stops at the 13th skipped step")
		for k, r := range recs[first:] {
			assert.Equal(t, true, r["skipped"], "skip %d", k+1)
			assert.Equal(t, math.Exp2(math.Max(0, math.Min(10, float64(11-k)))), r["loss_scale"], "loss scale of skip %d", k+1)
		}
		n := first + skips // 1-based iteration of the last record
		want := fmt.Sprintf("iteration %d: fp16 loss scaling gave up: %d steps in a row were skipped for inf/NaN gradients, "+
			"the last one at --min-loss-scale 1", n, skips)
		assert.Equal(t, want, err.Error())
		assert.Equal(t, (n-1)/2*2, latest(t, dir), "skipped steps leave the weights finite: the last interval's checkpoint")
	})

	t.Run("weights overflow", func(t *testing.T) {
		// An fp32 step of lr 1e39 makes every weight infinite, though iteration 1's loss
		// (before the step) is finite.
		dir := t.TempDir()
		_, err := run(context.Background(), tinyArgs(t, "--lr", "1e39", "--lr-warmup-iters", "0", "--save", dir,
			"--save-interval", "1", "--train-iters", "2", "--eval-iters", "0"), noEnv, io.Discard, io.Discard)
		require.Error(t, err)
		assert.Regexp(t, "^"+regexp.QuoteMeta("not saving iteration 1 to "+dir+": parameter ")+`\S+`+
			regexp.QuoteMeta(" holds NaN or Inf (nothing was saved there in this run)")+"$", err.Error())
		assert.Equal(t, 0, latest(t, dir), "no checkpoint published")
		assert.NoDirExists(t, filepath.Join(dir, "iter_0000001"))
	})
}

// TestLossScaleWarning: a constant loss scale below 1, which makes fp16 gradients
// underflow to zero, is warned about before training.
func TestLossScaleWarning(t *testing.T) {
	_, out := runTiny(t, tinyArgs(t, "--fp16", "--loss-scale", "1e-10", "--train-iters", "2", "--eval-iters", "0", "--gen-tokens", "0"))
	want := "warning: --loss-scale 1e-10 is below 1: it shrinks the fp16 gradients, which underflow to zero " +
		"and the loss does not move; use 0 (dynamic scaling) or a power of 2 such as 1024\n"
	assert.Contains(t, out, want)
	assert.Less(t, strings.Index(out, want), strings.Index(out, "iter 1/2"), "before the first iteration")
}

// TestBadNumbers: NaN and out-of-range values of the float flags are refused before
// any work, naming the flag and the value.
func TestBadNumbers(t *testing.T) {
	cases := []struct {
		flag, value, want string
	}{
		{"--lr", "NaN", "--lr must be a finite number ≥ 0, got NaN"},
		{"--lr", "-1e-3", "--lr must be a finite number ≥ 0, got -0.001"},
		{"--lr", "+Inf", "--lr must be a finite number ≥ 0, got +Inf"},
		{"--min-lr", "NaN", "--min-lr must be a finite number ≥ 0, got NaN"},
		{"--min-lr", "-1", "--min-lr must be a finite number ≥ 0, got -1"},
		{"--adam-beta1", "1", "--adam-beta1 1 is outside [0, 1)"},
		{"--adam-beta1", "NaN", "--adam-beta1 NaN is outside [0, 1)"},
		{"--adam-beta2", "-0.5", "--adam-beta2 -0.5 is outside [0, 1)"},
		{"--adam-eps", "NaN", "--adam-eps must be a finite number ≥ 0, got NaN"},
		{"--weight-decay", "-0.1", "--weight-decay must be a finite number ≥ 0, got -0.1"},
		{"--clip-grad", "NaN", "--clip-grad must be a finite number ≥ 0, got NaN"},
		{"--hidden-dropout", "NaN", "--hidden-dropout NaN is outside [0, 1)"},
		{"--hidden-dropout", "-0.1", "--hidden-dropout -0.1 is outside [0, 1)"},
		{"--attention-dropout", "1", "--attention-dropout 1 is outside [0, 1)"},
		{"--init-method-std", "NaN", "--init-method-std must be a finite number ≥ 0, got NaN"},
		{"--init-method-std", "-0.02", "--init-method-std must be a finite number ≥ 0, got -0.02"},
		{"--lr-warmup-fraction", "NaN", "--lr-warmup-fraction NaN is outside [0, 1]"},
		{"--temperature", "NaN", "--temperature must be a finite number ≥ 0, got NaN"},
		{"--temperature", "-1", "--temperature must be a finite number ≥ 0, got -1"},
		{"--loss-scale", "NaN", "--loss-scale must be a finite number ≥ 0, got NaN"},
		{"--loss-scale", "-1", "--loss-scale must be a finite number ≥ 0, got -1"},
		{"--initial-loss-scale", "NaN", "--initial-loss-scale must be a finite number > 0, got NaN"},
		{"--min-loss-scale", "0", "--min-loss-scale must be a finite number > 0, got 0"},
		{"--min-loss-scale", "1e10", "--min-loss-scale 1e+10 is above --initial-loss-scale 4.294967296e+09"},
		{"--exit-duration-in-mins", "-1", "--exit-duration-in-mins must be a finite number ≥ 0, got -1"},
	}
	for _, tc := range cases {
		t.Run(tc.flag+" "+tc.value, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			args := []string{"--cache-dir", testCache, "--out-dir", out, "--train-iters", "2", "--fp16", tc.flag, tc.value}
			var stdout bytes.Buffer
			_, err := run(context.Background(), args, noEnv, &stdout, io.Discard)
			require.Error(t, err)
			assert.Equal(t, tc.want, err.Error())
			assert.NoDirExists(t, out, "no work started")
		})
	}
}

// TestUnwritableOutput: a --save or --out-dir that cannot be written is refused before
// the first iteration, and a failed metrics write stops the run at once.
func TestUnwritableOutput(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"save is a file", []string{"--save", file}, "--save " + file + " cannot be written: mkdir " + file + ": not a directory"},
		{"save under a file", []string{"--save", file + "/ck"}, "--save " + file + "/ck cannot be written: mkdir " + file + "/ck: not a directory"},
		{"save under /proc", []string{"--save", "/proc/megago-test/ck"},
			"--save /proc/megago-test/ck cannot be written: mkdir /proc/megago-test: no such file or directory"},
		{"out-dir is a file", []string{"--out-dir", file}, "--out-dir " + file + " cannot be written: mkdir " + file + ": not a directory"},
		{"tensorboard-dir is a file", []string{"--tensorboard-dir", file},
			"--tensorboard-dir " + file + " cannot be written: mkdir " + file + ": not a directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout bytes.Buffer
			_, err := run(context.Background(), tinyArgs(t, tc.args...), noEnv, &stdout, io.Discard)
			require.Error(t, err)
			assert.Equal(t, tc.want, err.Error())
			assert.NotContains(t, stdout.String(), "iter ", "no iteration ran")
		})
	}

	t.Run("probing leaves nothing behind", func(t *testing.T) {
		parent := t.TempDir()
		out := filepath.Join(parent, "a", "out")
		_, err := run(context.Background(), tinyArgs(t, "--out-dir", out, "--save", filepath.Join(parent, "b", "ck"),
			"--data-path", filepath.Join(parent, "missing")), noEnv, io.Discard, io.Discard)
		require.ErrorContains(t, err, "missing.idx", "a data error found after the probe")
		entries, err := os.ReadDir(parent)
		require.NoError(t, err)
		assert.Empty(t, entries, "no directory created, no probe file left")
	})

	t.Run("metrics on a full disk", func(t *testing.T) {
		if _, err := os.Stat("/dev/full"); err != nil {
			t.Skip("needs /dev/full")
		}
		out := t.TempDir()
		metrics := filepath.Join(out, "metrics.jsonl")
		require.NoError(t, os.Symlink("/dev/full", metrics))
		var stdout bytes.Buffer
		_, err := run(context.Background(), tinyArgs(t, "--out-dir", out, "--log-interval", "5"), noEnv, &stdout, io.Discard)
		require.Error(t, err)
		assert.Equal(t, "iteration 1: writing "+metrics+": write "+metrics+": no space left on device", err.Error())
		assert.NotContains(t, stdout.String(), "iter 2/", "the run stops at the failed write")
	})
}

// TestPlannedExits: --exit-interval and --exit-duration-in-mins stop the run after an
// iteration, save it, and return without error.
func TestPlannedExits(t *testing.T) {
	for _, tc := range []struct {
		flags []string
		iters int
		line  string
	}{
		{[]string{"--exit-interval", "2"}, 2, "exiting after iteration 2 (--exit-interval 2)\n"},
		{[]string{"--exit-duration-in-mins", "1e-9"}, 1, "exiting after iteration 1 (--exit-duration-in-mins 1e-09)\n"},
	} {
		t.Run(tc.flags[0], func(t *testing.T) {
			dir := t.TempDir()
			sum, out := runTiny(t, tinyArgs(t, append([]string{"--save", dir}, tc.flags...)...))
			assert.Equal(t, tc.iters, sum.Iterations)
			assert.False(t, sum.Interrupted)
			assert.Contains(t, out, tc.line)
			assert.Contains(t, out, fmt.Sprintf("checkpoint: saved iteration %d to %s\n", tc.iters, dir))
			assert.NotContains(t, out, "generated from the prompt", "no generation after a planned exit")
			assert.Equal(t, tc.iters, latest(t, dir))
		})
	}
}
