package loop_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"megago/examples/internal/loop"
	"megago/examples/internal/report"
	"megago/examples/internal/settings"
	"megago/nn"
	"megago/optim"
	"megago/parallel"
	"megago/tensor"
	"megago/train"
)

// tiny is a one-rank GPT small enough to train for a few iterations in a test, with
// dropout so that the passes' dropout streams matter.
type tiny struct {
	mesh    *parallel.Mesh
	dev     *tensor.Device
	chunks  []*nn.GPT
	trainer *train.Trainer
	cfg     *settings.Common
}

const (
	vocab, seq = 16, 8
	seed       = 7
)

func newTiny(t *testing.T, iters int) *tiny {
	t.Helper()
	m, err := build(iters)
	require.NoError(t, err)
	return m
}

// build returns the tiny model with settings for iters iterations, validating every 2.
func build(iters int) (*tiny, error) {
	ctx := context.Background()
	mesh, err := parallel.NewMesh(ctx, parallel.Self(), parallel.Sizes{TP: 1, PP: 1})
	if err != nil {
		return nil, err
	}
	dev := tensor.NewCPU()
	b := &nn.Builder{Dev: dev, DType: tensor.F32, RNG: tensor.NewRNG(seed).Named("init"), TP: mesh.TP()}
	m := nn.GPTConfig{TransformerConfig: nn.TransformerConfig{NumLayers: 1, Hidden: 8, Heads: 2, Vocab: vocab,
		MaxPosition: seq, Bias: true, Dropout: 0.1}, VocabMultiple: 1}
	chunks, err := train.NewGPTChunks(b, m, mesh, 1)
	if err != nil {
		return nil, err
	}
	trainer, err := train.New(ctx, mesh, dev, train.GPTParts(chunks), train.Config{Optim: optim.Config{LR: 1e-2}})
	if err != nil {
		return nil, err
	}
	cfg := &settings.Common{TrainIters: iters, EvalInterval: 2, EvalIters: 1, MicroBatchSize: 2, Microbatches: 2, DP: 1}
	return &tiny{mesh: mesh, dev: dev, chunks: chunks, trainer: trainer, cfg: cfg}, nil
}

// batch returns iteration it's micro-batches: token ids and their next tokens [B, T].
func (m *tiny) batch(it int) train.GPTBatch {
	return func(micro int) (ids, labels *tensor.Tensor) {
		n := m.cfg.MicroBatchSize * seq
		x, y := make([]int32, n), make([]int32, n)
		for i := range n {
			x[i] = int32((3*i + 5*micro + 7*it) % vocab)
			y[i] = int32((3*i + 5*micro + 7*it + 1) % vocab)
		}
		return tensor.FromSlice(m.dev, x, m.cfg.MicroBatchSize, seq), tensor.FromSlice(m.dev, y, m.cfg.MicroBatchSize, seq)
	}
}

// calls records what the loop asked of its callbacks.
type calls struct {
	forward, eval []int
	save          []string
}

// loop returns a Loop over m that records its calls in c.
func (m *tiny) loop(c *calls, rep *report.Report) *loop.Loop {
	return &loop.Loop{Settings: m.cfg, Mesh: m.mesh, Dev: m.dev, Trainer: m.trainer, Report: rep,
		Dropout: tensor.NewRNG(seed).Named("dropout"),
		Forward: func(it int, pass func(micro int) *nn.Pass) (parallel.ForwardFunc, error) {
			c.forward = append(c.forward, it)
			return train.GPTForward(m.chunks, pass, m.batch(it)), nil
		},
		Eval: func(it int) error { c.eval = append(c.eval, it); return nil },
		Save: func(_ context.Context, it int, last bool, _ *report.Report) error {
			s := "save"
			if last {
				s = "last"
			}
			c.save = append(c.save, s)
			return nil
		},
	}
}

// reference runs iterations first, ..., iters-1 as a loop written out by hand would.
func (m *tiny) reference(t *testing.T, first int) []float64 {
	t.Helper()
	ctx, rng := context.Background(), tensor.NewRNG(seed).Named("dropout")
	var losses []float64
	for it := first; it < m.cfg.TrainIters; it++ {
		pass := func(micro int) *nn.Pass {
			return train.PassFor(ctx, m.mesh, rng, it, micro, m.cfg.MicroBatchSize, m.cfg.Microbatches)
		}
		res, err := m.trainer.Step(ctx, m.cfg.Schedule(), train.GPTForward(m.chunks, pass, m.batch(it)))
		require.NoError(t, err)
		losses = append(losses, res.Loss)
	}
	return losses
}

func TestRun(t *testing.T) {
	tests := []struct {
		name              string
		first             int
		forward, eval     []int
		save              []string
		wantIters, losses int
	}{
		{"from the start", 0, []int{0, 1, 2}, []int{2, 3}, []string{"save", "save", "last"}, 3, 3},
		{"resumed after 1", 1, []int{1, 2}, []int{2, 3}, []string{"save", "last"}, 3, 2},
		{"nothing left", 3, nil, nil, nil, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c calls
			got, err := newTiny(t, 3).loop(&c, nil).Run(context.Background(), tt.first)
			require.NoError(t, err)
			assert.Equal(t, tt.forward, c.forward, "iterations stepped (0-based)")
			assert.Equal(t, tt.eval, c.eval, "validations: every 2 iterations and after the last")
			assert.Equal(t, tt.save, c.save, "Save after every iteration, last at the end")
			assert.Equal(t, tt.wantIters, got.Iterations)
			assert.False(t, got.Interrupted)
			want := newTiny(t, 3).reference(t, tt.first)
			assert.Len(t, got.Losses, tt.losses)
			assert.Equal(t, want, got.Losses, "the losses of the loop written out")
		})
	}
}

// TestRunInterrupted checks that an ended ctx stops the loop before the next iteration
// and says so.
func TestRunInterrupted(t *testing.T) {
	m := newTiny(t, 3)
	var out strings.Builder
	rep, err := report.New(&out, report.Options{OutDir: t.TempDir(), Iters: 3, LogInterval: 1, Ranks: 1, Model: "GPT"})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var c calls
	got, err := m.loop(&c, rep).Run(ctx, 1)
	require.NoError(t, err)
	require.NoError(t, rep.Close())
	assert.True(t, got.Interrupted)
	assert.Zero(t, got.Iterations)
	assert.Empty(t, c.forward)
	assert.Contains(t, out.String(), "interrupted: stopping after iteration 1 on every rank")
}

// TestRunErrors checks that an error of Forward or Eval ends the loop with the
// iterations done before it.
func TestRunErrors(t *testing.T) {
	bad := errors.New("bad")
	for _, at := range []string{"forward", "eval"} {
		t.Run(at, func(t *testing.T) {
			m := newTiny(t, 3)
			var c calls
			l := m.loop(&c, nil)
			if at == "forward" {
				fwd := l.Forward
				l.Forward = func(it int, pass func(int) *nn.Pass) (parallel.ForwardFunc, error) {
					if it == 1 {
						return nil, bad
					}
					return fwd(it, pass)
				}
			} else {
				l.Eval = func(int) error { return bad }
			}
			got, err := l.Run(context.Background(), 0)
			assert.ErrorIs(t, err, bad)
			wantIters := map[string]int{"forward": 1, "eval": 2}[at] // Forward fails in iteration 2, Eval after it
			assert.Equal(t, wantIters, got.Iterations)
			assert.Len(t, got.Losses, wantIters)
		})
	}
}

// TestRunStops: --exit-interval and --exit-duration-in-mins stop the loop after an
// iteration and save it; a cancelled context (Ctrl-C, SIGTERM) stops it after the
// iteration it was cancelled in, which is saved only with --exit-signal-handler.
func TestRunStops(t *testing.T) {
	tests := []struct {
		name        string
		set         func(c *settings.Common, l *loop.Loop, cancel func())
		forward     []int
		eval        []int // iterations validated: at --eval-interval 2 and where a planned exit stops
		save        []string
		interrupted bool
		exited      bool
		line        string
	}{
		{"exit interval", func(c *settings.Common, _ *loop.Loop, _ func()) { c.ExitInterval = 2 },
			[]int{0, 1}, []int{2}, []string{"save", "last"}, false, true, "exiting after iteration 2 (--exit-interval 2)"},
		{"exit duration", func(c *settings.Common, l *loop.Loop, _ func()) {
			c.ExitDurationInMins = 1
			l.Start = time.Now().Add(-time.Minute)
		}, []int{0}, []int{1}, []string{"last"}, false, true, "exiting after iteration 1 (--exit-duration-in-mins 1)"},
		{"signal", func(_ *settings.Common, l *loop.Loop, cancel func()) { cancelIn(l, 1, cancel) },
			[]int{0, 1}, []int{2}, []string{"save", "save"}, true, false, "interrupted: stopping after iteration 2 on every rank"},
		{"signal with the handler", func(c *settings.Common, l *loop.Loop, cancel func()) {
			c.ExitSignalHandler = true
			cancelIn(l, 1, cancel)
		}, []int{0, 1}, []int{2}, []string{"save", "last"}, true, false, "interrupted: stopping after iteration 2 on every rank"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newTiny(t, 4)
			var out strings.Builder
			rep, err := report.New(&out, report.Options{OutDir: t.TempDir(), Iters: 4, LogInterval: 1, Ranks: 1, Model: "GPT"})
			require.NoError(t, err)
			var c calls
			l := m.loop(&c, rep)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			tt.set(m.cfg, l, cancel)
			got, err := l.Run(ctx, 0)
			require.NoError(t, err)
			require.NoError(t, rep.Close())
			assert.Equal(t, tt.forward, c.forward, "iterations stepped (0-based)")
			assert.Equal(t, tt.save, c.save, "Save after every iteration, last when it must save")
			assert.Equal(t, tt.eval, c.eval, "iterations validated")
			assert.Equal(t, len(tt.forward), got.Iterations)
			assert.Equal(t, tt.interrupted, got.Interrupted)
			assert.Equal(t, tt.exited, got.Exited)
			assert.True(t, got.Stopped())
			assert.Contains(t, out.String(), tt.line+"\n")
		})
	}
}

// cancelIn makes l's Forward call cancel in iteration it (0-based), as a signal
// arriving while it trains.
func cancelIn(l *loop.Loop, it int, cancel func()) {
	fwd := l.Forward
	l.Forward = func(i int, pass func(int) *nn.Pass) (parallel.ForwardFunc, error) {
		if i == it {
			cancel()
		}
		return fwd(i, pass)
	}
}
