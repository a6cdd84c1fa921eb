package device

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"megago/cuda"
	"megago/parallel"
	"megago/tensor"
)

// TestShortNoDevice: an error meaning "no GPU" is said in at most three lines that name
// the library and the files looked for, and still matches cuda.ErrNoDevice and the
// *cuda.LoadError it came from; other errors keep their text.
func TestShortNoDevice(t *testing.T) {
	dirs := []string{"/a", "/b", "/c", "/d", "/e", "/f"}
	load := &cuda.LoadError{Library: "driver", Files: []string{"libcuda.so.1", "libcuda.so"}, Dirs: dirs}
	old := &cuda.LoadError{Library: "driver", Files: []string{"libcuda.so.1"}, Missing: []string{"cuMemAllocAsync"}}
	other := errors.New("cuda: driver: cuInit: CUDA_ERROR_UNKNOWN (999)\nand a second line")
	cases := []struct {
		name   string
		err    error
		lines  int
		want   []string
		wrapNo bool // wraps cuda.ErrNoDevice
	}{
		{"library not found", fmt.Errorf("tensor: open backend %q: %w", "cuda", load), 3,
			[]string{"--device cuda: no usable GPU: the CUDA driver library was not found (looked for libcuda.so.1, libcuda.so)",
				"looked in /a, /b, /c, /d (and 2 more), and through the system loader", cuda.EnvLibDirs + "=DIR"}, true},
		{"library too old", old, 2, []string{"--device cuda: no usable GPU: cuda: driver", "lacks cuMemAllocAsync"}, true},
		{"no device visible", fmt.Errorf("cuda: no device visible: %w", cuda.ErrNoDevice), 2,
			[]string{"--device cuda: no usable GPU: cuda: no device visible: cuda: no CUDA device", "--device cpu"}, true},
		{"another failure", other, 2, []string{"--device cuda: cuda: driver: cuInit"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := short("--device cuda", tc.err)
			msg := err.Error()
			assert.Equal(t, tc.lines, strings.Count(msg, "\n")+1, msg)
			for _, w := range tc.want {
				assert.Contains(t, msg, w)
			}
			assert.Equal(t, tc.wrapNo, errors.Is(err, cuda.ErrNoDevice))
			assert.True(t, errors.Is(err, tc.err), "the full error stays reachable")
		})
	}
}

// TestOpen: a registered backend opens (a device of its own each time), an unknown name
// is refused with the registered ones, and closing a CPU device is a no-op.
func TestOpen(t *testing.T) {
	a, err := Open("cpu")
	require.NoError(t, err)
	b, err := Open("cpu")
	require.NoError(t, err)
	assert.NotSame(t, a, b)
	assert.NoError(t, CloseAll([]*tensor.Device{a, b}))
	_, err = Open("tpu")
	assert.EqualError(t, err, fmt.Sprintf("--device %q: want one of %v", "tpu", tensor.Backends()))
}

// TestNCCLNeedsCUDA: NCCL communicators are refused for devices that are not CUDA's.
func TestNCCLNeedsCUDA(t *testing.T) {
	dev := tensor.NewCPU()
	_, err := NCCL(context.Background(), parallel.Self(), dev)
	assert.EqualError(t, err, "--distributed-backend nccl needs --device cuda, not cpu")
}
