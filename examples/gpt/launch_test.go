package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
