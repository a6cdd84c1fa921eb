package main

import (
	"io"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"megago/tune"
)

// TestTuneConfigAccepted: the --config file megago tune writes for its best trial
// (tune.WriteConfig) is taken unchanged by this example's flag parsing, and gives the
// trial's values exactly: floats, integers (also one a float64 holds), strings and
// booleans, the trial's settings winning over the fixed ones.
func TestTuneConfigAccepted(t *testing.T) {
	file := filepath.Join(t.TempDir(), "best.json")
	fixed := []tune.Setting{{Flag: "micro-batch-size", Value: int64(4)}, {Flag: "lr", Value: 0.5},
		{Flag: "normalization", Value: "RMSNorm"}}
	best := tune.TrialResult{ID: 3, Settings: []tune.Setting{
		{Flag: "lr", Value: 0.0031622776601683794},
		{Flag: "lr-warmup-iters", Value: float64(20)},
		{Flag: "min-lr", Value: 1e-05},
		{Flag: "weight-decay", Value: int64(0)},
		{Flag: "lr-decay-style", Value: "linear"},
		{Flag: "untie-embeddings-and-output-weights", Value: true},
	}}
	require.NoError(t, tune.WriteConfig(file, best, fixed))
	c, err := parseConfig([]string{"--config", file}, 0, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, 4, c.MicroBatchSize)
	assert.Equal(t, "RMSNorm", c.Arch.Normalization)
	assert.Equal(t, 0.0031622776601683794, c.LR, "the trial's value, bit for bit")
	assert.Equal(t, 20, c.LRWarmupIters)
	assert.Equal(t, 1e-05, c.MinLR)
	assert.Equal(t, 0.0, c.WeightDecay)
	assert.Equal(t, "linear", c.LRDecayStyle)
	assert.True(t, c.UntieEmbeddings)
}
