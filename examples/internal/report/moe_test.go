package report

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"megago/train"
)

// TestMoEMetrics: two iterations of an MoE model with two MoE layers (1 and 3) of three
// experts, per-layer logging on: the progress line shows the window's averages, each
// iteration's record and TensorBoard scalars its own values under Megatron's names.
func TestMoEMetrics(t *testing.T) {
	dir := t.TempDir()
	var out bytes.Buffer
	r, err := New(&out, Options{OutDir: dir, Iters: 2, LogInterval: 2, TokensPerIter: 100, FLOPsPerIter: 1e9, Ranks: 1})
	require.NoError(t, err)
	its := []*MoE{
		{Losses: []MoELoss{{"load_balancing_loss", []float64{1.5, 1.0}}, {"z_loss", []float64{2, 4}}}, Layers: []int{1, 3},
			Tokens: [][]float64{{10, 20, 30}, {5, 25, 30}}, PerLayer: true},
		{Losses: []MoELoss{{"load_balancing_loss", []float64{0.5, 1.0}}, {"z_loss", []float64{2, 2}}}, Layers: []int{1, 3},
			Tokens: [][]float64{{30, 20, 10}, {15, 15, 30}}, PerLayer: true},
	}
	for i, m := range its {
		require.NoError(t, r.Step(i+1, train.StepResult{Loss: 3}, time.Second, m))
	}
	require.NoError(t, r.Close())

	// Window means: losses (1.25+0.75)/2 = 1 and (3+2)/2 = 2.5; counts per expert
	// layer 1 {20, 20, 20}, layer 3 {10, 20, 30}: min 10, max 30, mean 20.
	text := out.String()
	assert.Contains(t, text, "| grad norm 0.000 | load_balancing_loss 1.0000 | z_loss 2.5000 | tokens/expert min 10 max 30 mean 20 |")
	assert.Contains(t, text, "\n  moe layer 1 | load_balancing_loss 1.0000 | z_loss 2.0000 | tokens/expert min 20 max 20\n")
	assert.Contains(t, text, "\n  moe layer 3 | load_balancing_loss 1.0000 | z_loss 3.0000 | tokens/expert min 10 max 30\n")

	recs, err := ReadRecords(filepath.Join(dir, "metrics.jsonl"))
	require.NoError(t, err)
	assert.Equal(t, []float64{1.25, 0.75}, Losses(recs, "train", "load_balancing_loss"))
	assert.Equal(t, []float64{3, 2}, Losses(recs, "train", "z_loss"))
	assert.Equal(t, []float64{5, 10}, Losses(recs, "train", "tokens_per_expert_min"))
	assert.Equal(t, []float64{30, 30}, Losses(recs, "train", "tokens_per_expert_max"))
	assert.Equal(t, []float64{20, 20}, Losses(recs, "train", "tokens_per_expert_mean"))
	assert.Equal(t, []float64{1.5, 0.5}, Losses(recs, "train", "moe/load_balancing_loss_layer_1"))
	assert.Equal(t, []float64{5, 15}, Losses(recs, "train", "moe/tokens_per_expert_min_layer_3"))
	assert.Equal(t, []any{5.0, 25.0, 30.0}, recs[0]["moe/tokens_per_expert_layer_3"])

	events, _ := filepath.Glob(filepath.Join(dir, "tensorboard", "events.out.tfevents.*"))
	require.Len(t, events, 1)
	_, scalars, err := ReadEvents(events[0])
	require.NoError(t, err)
	got := map[string][]float64{}
	for _, s := range scalars {
		if strings.Contains(s.Tag, "loss") || strings.Contains(s.Tag, "tokens_per_expert") {
			got[s.Tag] = append(got[s.Tag], s.Value)
		}
	}
	assert.Equal(t, map[string][]float64{"load_balancing_loss": {1.25, 0.75}, "z_loss": {3, 2},
		"tokens_per_expert_min": {5, 10}, "tokens_per_expert_max": {30, 30}, "tokens_per_expert_mean": {20, 20},
		"moe/load_balancing_loss_layer_1": {1.5, 0.5}, "moe/load_balancing_loss_layer_3": {1, 1},
		"moe/z_loss_layer_1": {2, 2}, "moe/z_loss_layer_3": {4, 2},
		"moe/tokens_per_expert_min_layer_1": {10, 10}, "moe/tokens_per_expert_max_layer_1": {30, 30},
		"moe/tokens_per_expert_min_layer_3": {5, 15}, "moe/tokens_per_expert_max_layer_3": {30, 30},
		"lm loss": {3, 3}, "loss-scale": {0, 0}}, got)
}
