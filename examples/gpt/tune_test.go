package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"megago/tune"
)

// TestTune runs megago tune's search over this example at a tiny size, its trials
// processes of this test binary (mainEnv): two trials to rung 2, the better promoted
// to rung 4 from its checkpoint. Resume is exact, so the promoted trial's validation
// loss equals a run of its settings without stopping; best.json passes the example's
// checks.
func TestTune(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 3 processes")
	}
	exe, err := os.Executable()
	require.NoError(t, err)
	ctx, dir := context.Background(), t.TempDir()
	fixed := []string{"--cache-dir", testCache, "--num-layers", "2", "--hidden-size", "32", "--num-attention-heads", "4",
		"--seq-length", "32", "--micro-batch-size", "2", "--global-batch-size", "4", "--lr-warmup-iters", "1",
		"--eval-iters", "1", "--log-interval", "1", "--gen-tokens", "0"}
	space, err := tune.ParseSpace([]byte(`{"lr": {"min": 1e-3, "max": 3e-2, "scale": "log"}}`))
	require.NoError(t, err)
	prog := &tune.Program{Command: []string{exe}, Fixed: fixed, Env: []string{mainEnv + "=1"}, Dir: dir, Metric: "lm_loss"}
	require.NoError(t, prog.Check(ctx, space, 4))
	fixedSettings, err := tune.ParseFixed(fixed)
	require.NoError(t, err)
	trials, err := tune.Search(ctx, tune.Config{Space: space, Sampler: tune.NewRandom(space, 1), Rungs: tune.Rungs(2, 4, 2),
		Eta: 2, MaxTrials: 2, Dir: dir, Runner: prog, Fixed: fixedSettings, Record: map[string]any{"test": "gpt"}})
	require.NoError(t, err)
	require.Len(t, trials, 2)
	best := tune.Rank(trials)[0]
	require.Equal(t, "finished", best.State, "%+v", trials)
	require.Len(t, best.Rungs, 2)
	assert.Len(t, best.Curve, 4, "a training loss per iteration over both segments")

	sum, _ := runTiny(t, append(append(fixed, tune.Args(best.Settings)...), "--train-iters", "4", "--out-dir", t.TempDir()))
	assert.Equal(t, sum.ValidLoss, best.Final, "the promoted trial resumed its checkpoint exactly")
	assert.InDeltaSlice(t, sum.Losses[2:], []float64{best.Curve[2].Loss, best.Curve[3].Loss}, 0, "the second segment's training losses")

	_, out := runTiny(t, []string{"--config", filepath.Join(dir, tune.BestFile), "--check-only"})
	assert.Equal(t, "settings ok\n", out)
}

// TestCheckOnly: --check-only checks the settings and stops before any work: no output
// directory is created.
func TestCheckOnly(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	_, stdout := runTiny(t, []string{"--check-only", "--out-dir", out, "--lr", "0.5"})
	assert.Equal(t, "settings ok\n", stdout)
	assert.NoDirExists(t, out)
	_, err := run(context.Background(), []string{"--check-only", "--lr", "-1"}, noEnv, os.Stdout, os.Stderr)
	assert.ErrorContains(t, err, "--lr must be a finite number ≥ 0, got -1")
}
