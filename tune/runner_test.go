package tune

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"megago/internal/ckptlayout"
	"megago/internal/filelock"
)

// fakeProgram returns a Program running this test binary as the fake example in dir.
func fake(t *testing.T, dir string, fixed ...string) *Program {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	return &Program{Command: []string{exe}, Fixed: append([]string{"--num-layers", "2"}, fixed...),
		Env: []string{fakeEnv + "=1", "GOMAXPROCS=1"}, Dir: dir, Metric: "lm_loss"}
}

// TestProgramSearch runs a search whose trials are processes of the fake example,
// interrupts it (SIGTERM in the middle of a segment, which the example saves with
// --exit-signal-handler: a checkpoint past the last rung) and runs it again: the result
// equals the search run in-process with formula, whose losses the fake writes.
func TestProgramSearch(t *testing.T) {
	want, err := Search(context.Background(), testConfig(t, t.TempDir(), &formula{}))
	require.NoError(t, err)

	dir := t.TempDir()
	prog := fake(t, dir, "--exit-signal-handler", "--sleep", "2ms")
	ctx, cancel := context.WithCancel(context.Background())
	go func() { // SIGTERM once the first promotion to rung 1 has trained an iteration
		defer cancel()
		for {
			if m, _ := filepath.Glob(filepath.Join(dir, "trials", "*", "rung-1", "metrics.jsonl")); len(m) > 0 {
				if b, _ := os.ReadFile(m[0]); len(b) > 0 {
					return
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	_, err = Search(ctx, testConfig(t, dir, prog))
	require.ErrorIs(t, err, context.Canceled, "the search was interrupted in a second segment")
	got, err := Search(context.Background(), testConfig(t, dir, prog))
	require.NoError(t, err)
	assert.Equal(t, withoutTimes(want), withoutTimes(got))
}

// TestProgramCheck: the fake example's refusals are reported together, each naming
// its flag and value, before any trial runs.
func TestProgramCheck(t *testing.T) {
	s, err := ParseSpace([]byte(`{"lr": {"min": 0, "max": 1}, "wd": {"values": [0, 1]}, "foo": {"values": [1, 2]}}`))
	require.NoError(t, err)
	err = fake(t, t.TempDir()).Check(context.Background(), s, 8)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "2 problems:")
	assert.Contains(t, err.Error(), "--lr: the program refuses 0: fake: --lr must be positive, got 0")
	assert.Contains(t, err.Error(), "--foo: the program refuses 1: flag provided but not defined: -foo")
	assert.NotContains(t, err.Error(), "refuses 2", "an unknown flag is reported once")

	err = fake(t, t.TempDir(), "--bogus").Check(context.Background(), s, 8)
	assert.ErrorContains(t, err, `the program refuses the fixed flags "--num-layers 2 --bogus": flag provided but not defined: -bogus`)
}

// TestRollback: a segment run again resumes its previous rung's checkpoint, whatever
// an interrupted attempt saved after it.
func TestRollback(t *testing.T) {
	dir := t.TempDir()
	for _, it := range []int{2, 4, 7} {
		require.NoError(t, fakeSave(dir, it))
	}
	require.NoError(t, rollback(dir, 4))
	b, err := os.ReadFile(filepath.Join(dir, "latest_checkpointed_iteration.txt"))
	require.NoError(t, err)
	assert.Equal(t, "4", string(b))
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	assert.ElementsMatch(t, []string{"iter_0000004", "latest_checkpointed_iteration.txt"}, names)
	assert.ErrorContains(t, rollback(dir, 6), "the checkpoint of iteration 6 to resume")
	require.NoError(t, rollback(dir, 0))
	assert.NoDirExists(t, dir)
}

// TestWaitUnlocked: a segment waits while a process left by a killed search still
// holds its checkpoint directory's job lock.
func TestWaitUnlocked(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, waitUnlocked(context.Background(), dir), "no lock file")
	l, err := filelock.Acquire(filepath.Join(dir, ckptlayout.JobLockFile))
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- waitUnlocked(context.Background(), dir) }()
	select {
	case err := <-done:
		t.Fatalf("waitUnlocked returned %v while the lock was held", err)
	case <-time.After(300 * time.Millisecond):
	}
	require.NoError(t, l.Release())
	require.NoError(t, <-done)
}
