package main

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"megago/internal/fakedev" // registers "fake": a device with memory of its own, CPU kernels
)

// TestDeviceRunMatchesCPU trains at TP=2 on goroutine ranks whose devices are not the
// CPU: the fake backend (storage of its own, reachable only through host copies) gives
// the CPU's losses bit for bit, as its kernels are the CPU's.
func TestDeviceRunMatchesCPU(t *testing.T) {
	layout := []string{"--ranks", "2", "--tensor-model-parallel-size", "2", "--train-iters", "2", "--eval-iters", "1"}
	cpu, _ := runTiny(t, tinyArgs(t, layout...))
	fake, out := runTiny(t, tinyArgs(t, append(layout, "--device", fakedev.Name)...))
	assert.Contains(t, out, "float32 on "+fakedev.Name, "the model was built on the device")
	assert.Equal(t, cpu.Losses, fake.Losses, "training losses")
	assert.Equal(t, cpu.Valid, fake.Valid, "validation")
}
