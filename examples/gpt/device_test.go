package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"megago/internal/device"
	"megago/internal/fakedev" // registers "fake": a device with memory of its own, CPU kernels
	"megago/tensor"
)

// TestNoGPUSaysWhatWasLookedFor runs the program with --device cuda on a machine without
// a GPU: it stops before any work with at most three lines that name the driver library
// it looked for, on one rank and on goroutine ranks alike.
func TestNoGPUSaysWhatWasLookedFor(t *testing.T) {
	if dev, err := tensor.Open("cuda"); err == nil {
		device.Close(dev)
		t.Skip("needs a machine without a GPU (and without MEGAGO_CUDA_EMU)")
	}
	exe, err := os.Executable()
	require.NoError(t, err)
	for _, extra := range [][]string{nil, {"--ranks", "2", "--tensor-model-parallel-size", "2"}} {
		t.Run(strings.Join(append([]string{"--device", "cuda"}, extra...), " "), func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			args := append(tinyArgs(t, "--device", "cuda", "--out-dir", out), extra...)
			cmd := exec.Command(exe, args...)
			cmd.Env = append(os.Environ(), mainEnv+"=1")
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var exit *exec.ExitError
			require.True(t, errors.As(err, &exit), "the program fails: %v\n%s", err, stderr.String())
			assert.Equal(t, 1, exit.ExitCode())
			msg := strings.TrimRight(stderr.String(), "\n")
			t.Logf("stderr:\n%s", msg)
			assert.LessOrEqual(t, strings.Count(msg, "\n")+1, 3, "at most three lines")
			assert.True(t, strings.HasPrefix(msg, "gpt: --device cuda: no usable GPU"), msg)
			assert.Contains(t, msg, "libcuda")
			assert.Empty(t, stdout.String(), "no work started")
			assert.NoDirExists(t, out)
		})
	}
}

// TestDeviceRunMatchesCPU trains at TP=2 on goroutine ranks whose devices are not the
// CPU: the fake backend (storage of its own, reachable only through host copies; a
// tensor left on the CPU would meet the device's in an op and panic) gives the CPU's
// losses bit for bit, as its kernels are the CPU's.
func TestDeviceRunMatchesCPU(t *testing.T) {
	layout := []string{"--ranks", "2", "--tensor-model-parallel-size", "2", "--train-iters", "3", "--gen-tokens", "0"}
	cpu, _ := runTiny(t, tinyArgs(t, layout...))
	fake, out := runTiny(t, tinyArgs(t, append(layout, "--device", fakedev.Name)...))
	assert.Contains(t, out, "float32 on "+fakedev.Name, "the model was built on the device")
	assert.Equal(t, cpu.Losses, fake.Losses, "training losses")
	assert.Equal(t, cpu.ValidLoss, fake.ValidLoss, "validation loss")
}

// TestCheckpointAcrossDevices saves on one device and resumes on another: the losses
// after the checkpoint are those of a run that was never stopped, bit for bit between
// the CPU and the fake device (the same kernels).
func TestCheckpointAcrossDevices(t *testing.T) {
	straight, _ := runTiny(t, ckptArgs(t, "--train-iters", "4", "--eval-iters", "0"))
	for _, devs := range [][2]string{{fakedev.Name, "cpu"}, {"cpu", fakedev.Name}} {
		t.Run(devs[0]+" to "+devs[1], func(t *testing.T) {
			resumed := saveAndResume(t, devs[0], devs[1], 2)
			assert.Equal(t, straight.Losses[2:], resumed.Losses, "the losses after the checkpoint")
		})
	}
}

// saveAndResume trains n iterations of ckptArgs(extra) on device from and saves them,
// then resumes on device to for n more (--train-iters and --eval-iters of extra are
// overridden).
func saveAndResume(t *testing.T, from, to string, n int, extra ...string) *summary {
	t.Helper()
	dir := t.TempDir()
	iters := func(k int) []string { return []string{"--train-iters", strconv.Itoa(k), "--eval-iters", "0"} }
	runTiny(t, ckptArgs(t, slices.Concat(extra, iters(n), []string{"--save", dir, "--device", from})...))
	resumed, _ := runTiny(t, ckptArgs(t, slices.Concat(extra, iters(2*n), []string{"--load", dir, "--device", to})...))
	require.Equal(t, 2*n, resumed.Iterations)
	return resumed
}

// TestCUDARunFollowsCPU trains a small GPT at TP=2 on two goroutine ranks sharing the
// GPU (or the kernel emulator, MEGAGO_CUDA_EMU=1), over the in-process transport and
// (on the emulator) over NCCL, in fp32 and bf16 (fp32 master weights), and compares
// the losses with the CPU's at the same layout; a checkpoint saved on the GPU resumes
// on the CPU. It is skipped where tensor.Open("cuda") fails. Kept to two iterations of
// one micro-batch of 2 × 16 tokens: the emulator takes about a minute per iteration
// (the vocabulary is 8192).
func TestCUDARunFollowsCPU(t *testing.T) {
	dev, err := tensor.Open("cuda")
	if err != nil {
		t.Skipf("needs a GPU or MEGAGO_CUDA_EMU=1: %v", err)
	}
	device.Close(dev)
	// No warmup, so that the second iteration's loss follows an update.
	small := []string{"--num-layers", "2", "--seq-length", "16", "--micro-batch-size", "2", "--global-batch-size", "2",
		"--train-iters", "2", "--lr-warmup-iters", "0", "--gen-tokens", "0", "--eval-iters", "0"}
	tp2 := append([]string{"--ranks", "2", "--tensor-model-parallel-size", "2"}, small...)
	cpu, _ := runTiny(t, tinyArgs(t, tp2...))
	cases := []struct {
		name  string
		flags []string
		tol   float64 // relative, per iteration
	}{
		// The backends sum in different orders (cuBLASLt, tree reductions): float32
		// rounding carried through a few AdamW steps.
		{"fp32", nil, 1e-3},
		// bf16 weights and activations (8-bit mantissa) against the fp32 CPU run.
		{"bf16", []string{"--bf16"}, 0.03},
		{"fp32 nccl", []string{"--distributed-backend", "nccl"}, 1e-3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if slices.Contains(tc.flags, "nccl") && os.Getenv("MEGAGO_CUDA_EMU") != "1" {
				t.Skip("needs the emulator: NCCL refuses two ranks of one communicator on one GPU")
			}
			args := tinyArgs(t, slices.Concat(tp2, []string{"--device", "cuda"}, tc.flags)...)
			sum, err := run(context.Background(), args, noEnv, io.Discard, io.Discard)
			require.NoError(t, err)
			t.Logf("cpu  %.5f", cpu.Losses)
			t.Logf("cuda %.5f", sum.Losses)
			for i := range cpu.Losses {
				if d := math.Abs(sum.Losses[i]-cpu.Losses[i]) / cpu.Losses[i]; d > tc.tol {
					t.Errorf("iteration %d: loss %.6f on cuda, %.6f on the CPU (relative %.2g > %g)", i+1, sum.Losses[i], cpu.Losses[i], d, tc.tol)
				}
			}
		})
	}
	t.Run("checkpoint cuda to cpu", func(t *testing.T) {
		straight, _ := runTiny(t, ckptArgs(t, small...)) // two iterations
		resumed := saveAndResume(t, "cuda", "cpu", 1, small...)
		// One iteration on the GPU before the checkpoint: float32 rounding, as above.
		assert.InDelta(t, straight.Losses[1], resumed.Losses[0], 1e-3*straight.Losses[1], "the loss after the checkpoint")
	})
}
