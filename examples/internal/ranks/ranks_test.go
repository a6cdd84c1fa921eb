package ranks

import (
	"context"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"megago/nn"
	"megago/parallel"
	"megago/tensor"
)

// TestCountParams: a TP-split weight counts once in total, a replicated one once, a
// Shared copy not at all, whatever the TP size.
func TestCountParams(t *testing.T) {
	for _, tp := range []int{1, 2} {
		err := parallel.RunLocal(tp, func(world parallel.Comm) error {
			ctx := context.Background()
			mesh, err := parallel.NewMesh(ctx, world, parallel.Sizes{TP: tp})
			if err != nil {
				return err
			}
			dev := tensor.NewCPU()
			b := &nn.Builder{Dev: dev, DType: tensor.F32, RNG: tensor.NewRNG(1), TP: mesh.TP()}
			split := nn.NewColumnParallelLinear(b, "split", 4, 6, nn.LinearOptions{Bias: true}) // 24 + 6
			norm := nn.NewNorm(b, "norm", nn.LayerNormKind, 4, 1e-5)                            // 4 + 4, replicated
			shared := nn.NewLinear(b, "shared", 4, 4, nn.LinearOptions{})
			shared.Weight.Shared = true
			params := append(append(split.Params(), norm.Params()...), shared.Params()...)
			n, err := CountParams(ctx, mesh, params, dev)
			if err != nil {
				return err
			}
			if n != 38 {
				t.Errorf("tp %d rank %d: %d parameters, want 38", tp, world.Rank(), n)
			}
			stop, err := StopRequested(ctx, ctx, world, dev)
			if err != nil || stop {
				t.Errorf("StopRequested = %v, %v", stop, err)
			}
			return nil
		})
		require.NoError(t, err)
	}
}

// TestStopRequested: one rank's cancelled context stops every rank.
func TestStopRequested(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	devs, err := OpenDevices("cpu", false, nil, 3)
	require.NoError(t, err)
	defer devs.Close()
	err = Run(context.Background(), nil, devs, io.Discard, func(world parallel.Comm, dev *tensor.Device, _ io.Writer) error {
		ctx := context.Background()
		if world.Rank() == 1 {
			ctx = cancelled
		}
		stop, err := StopRequested(ctx, context.Background(), world, dev)
		if err == nil && !stop {
			t.Errorf("rank %d does not stop", world.Rank())
		}
		return err
	})
	require.NoError(t, err)
	assert.Nil(t, Output(nil, nil))
}

// TestRunNCCLNeedsCUDA: NCCL between ranks on CPU devices is refused before any rank
// starts.
func TestRunNCCLNeedsCUDA(t *testing.T) {
	devs, err := OpenDevices("cpu", true, nil, 2)
	require.NoError(t, err)
	defer devs.Close()
	err = Run(context.Background(), nil, devs, io.Discard, func(parallel.Comm, *tensor.Device, io.Writer) error {
		t.Error("a rank started")
		return nil
	})
	assert.EqualError(t, err, "--distributed-backend nccl needs --device cuda, not cpu")
	_, err = OpenDevices("tpu", false, nil, 2)
	assert.ErrorContains(t, err, `--device "tpu": want one of`)
}
