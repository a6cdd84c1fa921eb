package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"megago/internal/fakedev" // registers "fake": a device with memory of its own, CPU kernels
)

// TestDeviceRunMatchesCPU pretrains at TP=2 on goroutine ranks whose devices are not
// the CPU, saves, and fine-tunes a classifier from the checkpoint on that device and
// on the CPU: the fake backend (storage of its own, reachable only through host
// copies) gives the CPU's losses bit for bit, as its kernels are the CPU's.
func TestDeviceRunMatchesCPU(t *testing.T) {
	layout := []string{"--ranks", "2", "--tensor-model-parallel-size", "2", "--train-iters", "2", "--eval-iters", "1",
		"--fill-text", ""}
	cpu, _ := runTiny(t, tinyArgs(t, layout...))
	dir := t.TempDir()
	fake, out := runTiny(t, tinyArgs(t, append(layout, "--device", fakedev.Name, "--save", dir)...))
	assert.Contains(t, out, "float32 on "+fakedev.Name, "the model was built on the device")
	assert.Equal(t, cpu.Losses, fake.Losses, "pretraining losses")
	require.NotNil(t, fake.Valid)
	assert.Equal(t, *cpu.Valid, *fake.Valid, "validation")

	tune := func(dev string) *summary {
		sum, _ := runTiny(t, []string{"--cache-dir", testCache, "--out-dir", t.TempDir(), "--finetune-classify", "--load", dir,
			"--seq-length", "32", "--micro-batch-size", "4", "--train-iters", "2", "--eval-iters", "1", "--device", dev})
		return sum
	}
	onCPU, onFake := tune("cpu"), tune(fakedev.Name)
	assert.Equal(t, onCPU.Losses, onFake.Losses, "fine-tuning losses, the checkpoint saved on the device")
	assert.Equal(t, onCPU.Classify.Samples, onFake.Classify.Samples)
}
