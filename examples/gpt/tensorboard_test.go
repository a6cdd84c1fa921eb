package main

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"megago/examples/internal/report"
	"megago/internal/plot"
)

// TestRunWritesTensorBoard: a run's event file holds Megatron's scalars for every
// iteration, and its loss plot is a PNG.
func TestRunWritesTensorBoard(t *testing.T) {
	out := t.TempDir()
	sum, _ := runTiny(t, tinyArgs(t, "--out-dir", out, "--train-iters", "3", "--gen-tokens", "0"))
	matches, err := filepath.Glob(filepath.Join(out, "tensorboard", "events.out.tfevents.*"))
	require.NoError(t, err)
	require.Len(t, matches, 1)
	_, scalars, err := report.ReadEvents(matches[0])
	require.NoError(t, err)
	byTag := map[string][]report.Scalar{}
	for _, s := range scalars {
		byTag[s.Tag] = append(byTag[s.Tag], s)
	}
	for _, tag := range []string{"lm loss", "learning-rate", "grad-norm", "loss-scale", "throughput"} {
		assert.Len(t, byTag[tag], 3, tag)
	}
	for i, s := range byTag["lm loss"] {
		assert.Equal(t, i+1, s.Step)
		assert.Equal(t, float64(float32(sum.Losses[i])), s.Value, "TensorBoard keeps float32")
	}
	assert.Equal(t, 1.0, byTag["loss-scale"][0].Value, "no loss scaling in fp32")
	assert.NotEmpty(t, byTag["lm loss validation"])
	assert.NotEmpty(t, byTag["lm loss validation ppl"])

	img, err := plot.ReadPNG(filepath.Join(out, "loss.png"))
	require.NoError(t, err)
	assert.Equal(t, report.PlotW, img.Bounds().Dx())
}
