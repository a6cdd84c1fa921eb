package train

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"megago/nn"
	"megago/optim"
	"megago/parallel"
	"megago/tensor"
)

// TestPassLossScale: the LossScale of Trainer.PassFor is the factor by which backward
// receives each micro-batch's loss (measured with a zero probe added to the loss: its
// gradient is that factor), 1/M times the loss scaler's scale; package PassFor's is 1/M.
// Step calls the after-step hook once.
func TestPassLossScale(t *testing.T) {
	const micro, scale = 4, 8.0
	ctx := context.Background()
	err := parallel.RunLocal(1, func(world parallel.Comm) error {
		mesh, err := parallel.NewMesh(ctx, world, parallel.Sizes{})
		if err != nil {
			return err
		}
		dev := tensor.NewCPU()
		b := &nn.Builder{Dev: dev, DType: tensor.F64, RNG: tensor.NewRNG(7), TP: mesh.TP()}
		chunks, err := NewGPTChunks(b, tinyGPTConfig(false), mesh, 1)
		if err != nil {
			return err
		}
		tr, err := New(ctx, mesh, dev, GPTParts(chunks), Config{Optim: optim.Config{LR: 1e-2,
			Scaler: optim.ConstantScaler{Value: scale}}})
		if err != nil {
			return err
		}
		rng := tensor.NewRNG(99)
		if got := PassFor(ctx, mesh, rng, 0, 0, tinyBatch, micro).LossScale; got != 1.0/micro {
			return fmt.Errorf("PassFor: LossScale %v, want 1/%d", got, micro)
		}
		after := 0
		tr.afterStep = func(context.Context) error { after++; return nil }
		var passes []*nn.Pass
		var received []float64 // per micro-batch: the gradient of its probe
		pass := func(m int) *nn.Pass {
			p := tr.PassFor(ctx, rng, 0, m, tinyBatch, micro)
			passes = append(passes, p)
			return p
		}
		inner := GPTForward(chunks, pass, tinyGPTBatch(dev, mesh, 0))
		fwd := func(s parallel.Step) (*tensor.Tensor, error) {
			loss, err := inner(s)
			probe := tensor.Scalar(dev, loss.DType(), 0)
			probe.SetRequiresGrad(true)
			probe.SetGradHook(func(p *tensor.Tensor) { received = append(received, p.Grad().Item()) })
			return tensor.Add(loss, probe), err
		}
		if _, err := tr.Step(ctx, parallel.NoPipelining{M: micro}, fwd); err != nil {
			return err
		}
		if len(passes) != micro || len(received) != micro || after != 1 {
			return fmt.Errorf("%d passes, %d probe gradients, %d after-step calls; want %d, %d, 1", len(passes), len(received), after, micro, micro)
		}
		for i, p := range passes {
			if p.LossScale != scale/micro || received[i] != p.LossScale {
				return fmt.Errorf("micro-batch %d: LossScale %v, backward received the loss times %v; want %v", i, p.LossScale, received[i], scale/micro)
			}
		}
		return nil
	})
	require.NoError(t, err)
}
