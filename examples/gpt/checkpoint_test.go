package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"megago/checkpoint"
	"megago/internal/filelock"
)

// ckptArgs are tinyArgs with dropout on and a schedule that does not depend on
// --train-iters, so that a run stopped early and resumed is the run not stopped.
func ckptArgs(t *testing.T, extra ...string) []string {
	return tinyArgs(t, append([]string{"--hidden-dropout", "0.1", "--lr-decay-iters", "6", "--gen-tokens", "0"}, extra...)...)
}

// Three iterations, --save, then --load and three more give the losses of six straight
// iterations, bit for bit on the same layout and within layoutTol at TP=2 (the
// checkpoint is resharded on loading); --eval-only reports the saved model's validation
// loss, and --finetune starts a new run from its weights.
func TestCheckpointResume(t *testing.T) {
	straight, _ := runTiny(t, ckptArgs(t, "--train-iters", "6"))
	dir := t.TempDir()
	first, out := runTiny(t, ckptArgs(t, "--train-iters", "3", "--save", dir))
	assert.Contains(t, out, "checkpoint: saved iteration 3")
	require.Equal(t, straight.Losses[:3], first.Losses)

	resumed, out := runTiny(t, ckptArgs(t, "--train-iters", "6", "--load", dir))
	assert.Contains(t, out, "checkpoint: resumed from "+dir+", iteration 3 (saved at TP 1 × PP 1 × DP 1)")
	assert.Equal(t, 6, resumed.Iterations)
	assert.Equal(t, straight.Losses[3:], resumed.Losses, "resumed on the same layout")
	assert.Equal(t, straight.ValidLoss, resumed.ValidLoss)

	tp2, _ := runTiny(t, ckptArgs(t, "--train-iters", "6", "--load", dir, "--ranks", "2", "--tensor-model-parallel-size", "2"))
	assert.InDeltaSlice(t, straight.Losses[3:], tp2.Losses, layoutTol, "resumed at TP=2")

	eval, out := runTiny(t, ckptArgs(t, "--load", dir, "--eval-only"))
	assert.Equal(t, first.ValidLoss, eval.ValidLoss, "validation loss of the loaded model")
	assert.Contains(t, out, "validation at iteration 3")
	assert.Zero(t, eval.Iterations)

	tuned, out := runTiny(t, ckptArgs(t, "--load", dir, "--finetune", "--train-iters", "2"))
	assert.Contains(t, out, "loaded the weights of")
	assert.Equal(t, 2, tuned.Iterations)
	assert.Less(t, tuned.Losses[0], straight.Losses[0], "fine-tuning starts from the trained weights")
}

func TestCheckpointFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--eval-only"}, "--finetune and --eval-only need --load"},
		{[]string{"--save-interval", "2"}, "--save-interval needs --save"},
		{[]string{"--load", t.TempDir()}, "no checkpoint in"},
		{[]string{"--load", t.TempDir(), "--finetune"}, "no checkpoint in"},
	} {
		_, err := run(context.Background(), tinyArgs(t, tc.args...), noEnv, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want %q", tc.args, err, tc.want)
		}
	}
}

// TestSecondJobRefused: while a job saving to --save runs, a second job given the same
// --save refuses to start, naming the directory and the first job's process id; once
// the first job has ended, the directory can be used again.
func TestSecondJobRefused(t *testing.T) {
	if !filelock.Supported {
		t.Skip("needs flock (a Unix system)")
	}
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	running, release := make(chan struct{}), make(chan struct{})
	w := &blockOn{running: running, release: release}
	firstErr := make(chan error, 1)
	go func() {
		_, err := run(ctx, ckptArgs(t, "--save", dir, "--train-iters", "50"), noEnv, w, io.Discard)
		firstErr <- err
	}()
	select {
	case <-running: // the first job is in its first iteration, holding --save
	case err := <-firstErr:
		t.Fatalf("the first job ended before its first iteration: %v", err)
	}
	var out bytes.Buffer
	_, err := run(context.Background(), ckptArgs(t, "--save", dir), noEnv, &out, io.Discard)
	cancel() // the first job stops after its iteration
	close(release)
	require.Error(t, err)
	want := "--save: checkpoint: another job saves to " + dir + ": " + filepath.Join(dir, checkpoint.JobLockFile) +
		" is locked by process " + strconv.Itoa(os.Getpid())
	assert.Equal(t, want, err.Error())
	assert.NotContains(t, out.String(), "iter ", "the second job trains nothing")
	require.NoError(t, <-firstErr)

	_, err = run(context.Background(), ckptArgs(t, "--save", dir, "--train-iters", "1"), noEnv, io.Discard, io.Discard)
	assert.NoError(t, err, "the directory is free once the first job has ended")
}

// blockOn closes running at the first progress line written to it and blocks that write
// until release is closed.
type blockOn struct {
	once             sync.Once
	running, release chan struct{}
}

func (b *blockOn) Write(p []byte) (int, error) {
	if strings.HasPrefix(string(p), "iter ") {
		b.once.Do(func() {
			close(b.running)
			<-b.release
		})
	}
	return len(p), nil
}
