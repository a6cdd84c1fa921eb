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

	"megago/examples/internal/report"
	"megago/internal/launch"
)

// TestLaunchMatchesOneRank runs the program as 2 processes under the launcher behind
// megago launch (TCP transport, TP=2) and compares the loss curve with one in-process
// rank. The processes are this test binary, which runs main when mainEnv is set (see
// TestMain).
func TestLaunchMatchesOneRank(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 2 processes")
	}
	exe, err := os.Executable()
	require.NoError(t, err)
	want := reference(t)
	out := t.TempDir()
	args := tinyArgs(t, "--tensor-model-parallel-size", "2", "--out-dir", out)
	var stdout, stderr bytes.Buffer
	err = launch.Run(context.Background(), launch.Config{N: 2, ExtraEnv: []string{mainEnv + "=1"}}, exe, args, &stdout, &stderr)
	require.NoError(t, err, "stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())

	recs, err := report.ReadRecords(filepath.Join(out, "metrics.jsonl"))
	require.NoError(t, err)
	assert.InDeltaSlice(t, want.Losses, report.Losses(recs, "train", "loss"), layoutTol, "training losses")
	valid := report.Losses(recs, "valid", "lm_loss")
	require.NotEmpty(t, valid)
	assert.InDelta(t, want.Valid.LM(), valid[len(valid)-1], layoutTol, "validation MLM loss")
	assert.Contains(t, stdout.String(), "[rank 0] layout: 2 rank(s) = TP 2 × PP 1 × DP 1")
	assert.Contains(t, stdout.String(), "[rank 0] filled in line 1 of --fill-text")
	for _, line := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
		assert.True(t, strings.HasPrefix(line, "[rank 0] "), "only rank 0 reports: %q", line)
	}
}
