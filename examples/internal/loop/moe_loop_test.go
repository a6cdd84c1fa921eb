package loop_test

import (
	"context"
	"io"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"megago/examples/internal/loop"
	"megago/examples/internal/report"
	"megago/nn"
	"megago/parallel"
	"megago/train"
)

// TestLoopLogsMoE: a Loop with MoE logs each step's statistics (here a stand-in for
// nn.MoEStats: one MoE layer of two experts, two micro-batches) in metrics.jsonl.
func TestLoopLogsMoE(t *testing.T) {
	m, err := build(2)
	require.NoError(t, err)
	dir := t.TempDir()
	rep, err := report.New(io.Discard, report.Options{OutDir: dir, Iters: 2, LogInterval: 1, Ranks: 1})
	require.NoError(t, err)
	l := m.loop(&calls{}, rep)
	step := 0
	l.Forward = func(it int, pass func(micro int) *nn.Pass) (parallel.ForwardFunc, error) {
		step = it + 1 // what the stand-in records from now on belongs to this step
		return train.GPTForward(m.chunks, pass, m.batch(it)), nil
	}
	l.MoE = &loop.MoELog{Config: nn.MoEConfig{NumExperts: 2, AuxLossCoeff: 0.5}, NumLayers: 1,
		Stats: func() []loop.MoELayerStats {
			// 0.5 × (1.0 + step) per micro-batch; 0 before the first step (dropped).
			return []loop.MoELayerStats{{Layer: 0, AuxLoss: 2 * 0.5 * float64(1+step), Micro: 2, TokensPerExpert: []int64{int64(step), 3}}}
		}}
	_, err = l.Run(context.Background(), 0)
	require.NoError(t, err)
	require.NoError(t, rep.Close())
	recs, err := report.ReadRecords(filepath.Join(dir, "metrics.jsonl"))
	require.NoError(t, err)
	assert.Equal(t, []float64{2, 3}, report.Losses(recs, "train", "load_balancing_loss"))
	assert.Equal(t, []float64{1, 2}, report.Losses(recs, "train", "tokens_per_expert_min"))
	assert.Equal(t, []float64{3, 3}, report.Losses(recs, "train", "tokens_per_expert_max"))
}
