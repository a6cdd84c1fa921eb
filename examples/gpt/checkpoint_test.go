package main

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
