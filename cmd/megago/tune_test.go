package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTuneRefuses: megago tune's bad command lines are refused before any trial runs,
// each with a message that names the problem.
func TestTuneRefuses(t *testing.T) {
	dir := t.TempDir()
	space := filepath.Join(dir, "space.json")
	require.NoError(t, os.WriteFile(space, []byte(`{"lr": {"min": 1e-4, "max": 1e-2, "scale": "log"}}`), 0o644))
	badSpace := filepath.Join(dir, "bad.json")
	require.NoError(t, os.WriteFile(badSpace, []byte(`{"lr": {"min": 0, "max": 1e-2, "scale": "log"}, "wd": {"values": []}}`), 0o644))
	out := filepath.Join(dir, "out")
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no program", []string{"--space", space, "--max-iters", "8"}, "give one of --example and --program"},
		{"both", []string{"--example", "gpt", "--program", "x", "--space", space, "--max-iters", "8"}, "give one of --example and --program"},
		{"unknown example", []string{"--example", "llama", "--space", space, "--max-iters", "8"}, `--example "llama": want gpt, bert or t5`},
		{"no space", []string{"--example", "gpt", "--max-iters", "8"}, "--space is required"},
		{"no max iters", []string{"--example", "gpt", "--space", space}, "--max-iters must be at least 1"},
		{"min above max", []string{"--example", "gpt", "--space", space, "--max-iters", "8", "--min-iters", "9"}, "--min-iters must be between 0 and --max-iters 8"},
		{"η below 1", []string{"--example", "gpt", "--space", space, "--max-iters", "8", "--reduction-factor", "0.5"}, "--reduction-factor must be at least 1"},
		{"bad sampler", []string{"--example", "gpt", "--space", space, "--max-iters", "8", "--sampler", "bayes"}, `unknown sampler "bayes"`},
		{"negative startup trials", []string{"--example", "gpt", "--space", space, "--max-iters", "8", "--sampler", "tpe", "--startup-trials", "-1"}, "--startup-trials not negative"},
		{"grid without points", []string{"--example", "gpt", "--space", space, "--max-iters", "8", "--sampler", "grid"}, `--lr: grid sampling needs "points"`},
		{"bad space", []string{"--example", "gpt", "--space", badSpace, "--max-iters", "8"}, "2 problems:\n\t--lr: a log scale needs min > 0, got 0\n\t--wd: \"values\" is empty"},
		{"searched and fixed", []string{"--example", "gpt", "--space", space, "--max-iters", "8", "--", "--lr", "0.1"}, "--lr is both searched and fixed"},
		{"set by tune", []string{"--example", "gpt", "--space", space, "--max-iters", "8", "--", "--save", "x"}, "--save: set by the search"},
		{"refused", []string{"--program", "false", "--space", space, "--max-iters", "8", "--max-trials", "1", "--out-dir", out}, "the program refuses the fixed flags"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := run(t, append([]string{"tune"}, tt.args...)...)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
			assert.NoFileExists(t, filepath.Join(out, "tune.jsonl"), "nothing ran")
		})
	}
}
