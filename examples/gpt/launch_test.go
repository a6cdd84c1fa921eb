package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"megago/internal/launch"
)

// TestLaunchMatchesOneRank runs the program as 4 processes under the launcher behind
// megago launch (TCP transport, TP=2 × PP=2) and compares the loss curve with one
// in-process rank. The processes are this test binary, which runs main when mainEnv is
// set (see TestMain).
func TestLaunchMatchesOneRank(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 4 processes")
	}
	exe, err := os.Executable()
	require.NoError(t, err)
	want := reference(t)
	out := t.TempDir()
	args := tinyArgs(t, "--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2", "--out-dir", out)
	var stdout, stderr bytes.Buffer
	err = launch.Run(context.Background(), launch.Config{N: 4, ExtraEnv: []string{mainEnv + "=1"}}, exe, args, &stdout, &stderr)
	require.NoError(t, err, "stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())

	got := readMetrics(t, filepath.Join(out, "metrics.jsonl"))
	assert.InDeltaSlice(t, want.Losses, got.train, layoutTol, "training losses")
	require.NotEmpty(t, got.valid)
	assert.InDelta(t, want.ValidLoss, got.valid[len(got.valid)-1], layoutTol, "validation loss")
	assert.Contains(t, stdout.String(), "[rank 0] layout: 4 rank(s) = TP 2 × PP 2 × DP 1")
	assert.Contains(t, stdout.String(), "[rank 0] generated from the prompt")
	for _, line := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
		assert.True(t, strings.HasPrefix(line, "[rank 0] "), "only rank 0 reports: %q", line)
	}
}

// TestSIGTERMSavesAndResumes runs two TCP processes (PP=2) with --exit-signal-handler
// and sends them SIGTERM through the launcher, as megago launch forwards it, once two
// iterations are reported: both stop after the same iteration and save it, and that
// checkpoint resumes to the losses of a run that was never stopped.
func TestSIGTERMSavesAndResumes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 2 processes")
	}
	exe, err := os.Executable()
	require.NoError(t, err)
	dir := t.TempDir()
	layout := []string{"--pipeline-model-parallel-size", "2", "--eval-iters", "0"}
	args := ckptArgs(t, append(layout, "--train-iters", "1000", "--save", dir, "--exit-signal-handler")...)
	sigs := make(chan os.Signal, 1)
	w := &cancelOn{lines: 2, cancel: func() { sigs <- syscall.SIGTERM }}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // kills the processes if they do not stop
	defer cancel()
	var stderr bytes.Buffer
	err = launch.Run(ctx, launch.Config{N: 2, ExtraEnv: []string{mainEnv + "=1"}, Signals: sigs}, exe, args, w, &stderr)
	require.EqualError(t, err, "interrupted by terminated", "stdout:\n%s\nstderr:\n%s", w.String(), stderr.String())

	k := latest(t, dir)
	require.GreaterOrEqual(t, k, 2, "stdout:\n%s", w.String())
	assert.Contains(t, w.String(), fmt.Sprintf("[rank 0] interrupted: stopping after iteration %d on every rank\n", k))
	assert.Contains(t, w.String(), fmt.Sprintf("[rank 0] checkpoint: saved iteration %d to %s\n", k, dir))

	ranks2 := append(layout, "--ranks", "2", "--train-iters", strconv.Itoa(k+2))
	straight, _ := runTiny(t, ckptArgs(t, ranks2...))
	resumed, _ := runTiny(t, ckptArgs(t, append(ranks2, "--load", dir)...))
	assert.Equal(t, straight.Losses[k:], resumed.Losses, "the losses after the checkpoint")
}
