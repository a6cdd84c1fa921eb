package tensor_test

import (
	"fmt"
	"math"
	"testing"

	"megago/internal/testutil"
	"megago/tensor"
)

// Tests of activation recomputation (tensor.Checkpoint): the recomputed path must give
// the plain path's loss and gradients bit for bit, free its activations, and reach the
// pool's steady state like any other step.

const dropoutP = 0.2

// mlpBlock is Linear → GeLU → Dropout → Linear on [B, T, C] activations.
type mlpBlock struct {
	w1, b1 *tensor.Tensor // [C, F], [F]
	w2, b2 *tensor.Tensor // [F, C], [C]
	rng    tensor.RNG     // dropout key of this block and step
}

func newMLPBlock(dev *tensor.Device) *mlpBlock {
	rng := tensor.NewRNG(5).Named("init")
	normal := func(layer uint64, shape ...int) *tensor.Tensor {
		return rng.Fold(layer).Normal(dev, tensor.F32, tensor.Whole(shape...), 0, 0.3).SetRequiresGrad(true)
	}
	return &mlpBlock{
		w1: normal(0, smallC, smallF), b1: normal(1, smallF),
		w2: normal(2, smallF, smallC), b2: normal(3, smallC),
		rng: tensor.NewRNG(5).Named("dropout"),
	}
}

func (m *mlpBlock) params() []*tensor.Tensor { return []*tensor.Tensor{m.w1, m.b1, m.w2, m.b2} }

func (m *mlpBlock) forward(x *tensor.Tensor) *tensor.Tensor {
	h := tensor.GeLU(tensor.Add(tensor.MatMul(x, m.w1), m.b1)) // [B, T, F]
	h = tensor.Dropout(h, dropoutP, m.rng)                     // [B, T, F]
	return tensor.Add(tensor.MatMul(h, m.w2), m.b2)            // [B, T, C]
}

// checkpointed runs the block through tensor.Checkpoint.
func (m *mlpBlock) checkpointed(x *tensor.Tensor) *tensor.Tensor {
	return tensor.Checkpoint(func(in []*tensor.Tensor) []*tensor.Tensor {
		return []*tensor.Tensor{m.forward(in[0])}
	}, x)[0]
}

// blockLoss is mean(y²) of the block's output: every output element gets a gradient.
func blockLoss(y *tensor.Tensor) *tensor.Tensor { return tensor.Mean(tensor.Mul(y, y)) }

// gradBits collects the loss and every gradient as bit patterns and zeroes the parameter
// gradients for the next run.
func gradBits(loss, x *tensor.Tensor, m *mlpBlock) map[string][]uint32 {
	out := map[string][]uint32{"loss": bits(loss)}
	if x.RequiresGrad() {
		out["x"] = bits(x.Grad())
	}
	for i, p := range m.params() {
		out[fmt.Sprint("param", i)] = bits(p.Grad())
		p.ZeroGrad()
	}
	return out
}

func compareRuns(t *testing.T, plain, recomputed map[string][]uint32) {
	t.Helper()
	if len(plain) != len(recomputed) {
		t.Errorf("plain path has %d results, recomputed %d", len(plain), len(recomputed))
	}
	for name, want := range plain {
		if i := firstDiff(recomputed[name], want); i >= 0 {
			t.Errorf("%s: recomputation differs from the plain path at element %d", name, i)
		}
	}
}

func blockInput(dev *tensor.Device, requiresGrad bool) *tensor.Tensor {
	return tensor.FromSlice(dev, hostData(21, smallB*smallT*smallC), smallB, smallT, smallC).SetRequiresGrad(requiresGrad)
}

func TestCheckpointGradientsBitIdentical(t *testing.T) {
	for _, inputGrad := range []bool{true, false} {
		t.Run(fmt.Sprintf("input requires grad=%v", inputGrad), func(t *testing.T) {
			testutil.ForEachBackend(t, func(t *testing.T, dev *tensor.Device) {
				m := newMLPBlock(dev)
				run := func(block func(*tensor.Tensor) *tensor.Tensor) map[string][]uint32 {
					s := dev.NewScope()
					defer s.Close()
					x := blockInput(dev, inputGrad)
					loss := blockLoss(block(x))
					loss.Backward()
					return gradBits(loss, x, m)
				}
				plain := run(m.forward)
				compareRuns(t, plain, run(m.checkpointed))
			})
		})
	}
}

// TestCheckpointInsideNestedScopes: the forward runs in one scope, whose storage is
// released before the backward runs in another, as a pipeline stage does between a
// micro-batch's forward and backward. Only recomputation makes this possible.
func TestCheckpointInsideNestedScopes(t *testing.T) {
	testutil.ForEachBackend(t, func(t *testing.T, dev *tensor.Device) {
		m := newMLPBlock(dev)

		plain := func() map[string][]uint32 {
			s := dev.NewScope()
			defer s.Close()
			x := blockInput(dev, true)
			loss := blockLoss(m.forward(x))
			loss.Backward()
			return gradBits(loss, x, m)
		}()

		outer := dev.NewScope()
		x := blockInput(dev, true)
		fwd := dev.NewScope()
		y := m.checkpointed(x).Keep() // the stage's output, sent downstream
		inUse := dev.Stats().InUse
		fwd.Close()
		if freed := inUse - dev.Stats().InUse; freed != 0 {
			// With recomputation the forward scope holds nothing but the kept output.
			t.Errorf("closing the forward scope freed %d bytes: the checkpoint kept activations", freed)
		}
		bwd := dev.NewScope()
		loss := blockLoss(y)
		loss.Backward()
		got := gradBits(loss, x, m)
		bwd.Close()
		if x.Grad().Released() {
			t.Errorf("input gradient released by an inner scope")
		}
		outer.Close()
		compareRuns(t, plain, got)
	})
}

// TestCheckpointFreesActivations: after a checkpointed forward, the pool holds the
// block's output and nothing else of the block.
func TestCheckpointFreesActivations(t *testing.T) {
	testutil.ForEachBackend(t, func(t *testing.T, dev *tensor.Device) {
		m := newMLPBlock(dev)
		s := dev.NewScope()
		defer s.Close()
		x := blockInput(dev, true)
		before := dev.Stats().InUse
		y := m.checkpointed(x)
		if held, out := dev.Stats().InUse-before, int64(y.Numel()*4); held != out {
			t.Errorf("checkpointed forward holds %d bytes, want only its output's %d", held, out)
		}
		before = dev.Stats().InUse
		m.forward(x)
		if held := dev.Stats().InUse - before; held <= int64(y.Numel()*4) {
			t.Errorf("plain forward holds only %d bytes: the test does not measure activations", held)
		}
	})
}

func TestCheckpointTrainingAllocatesNothingFromStepThree(t *testing.T) {
	results := map[string]map[string][]uint32{}
	testutil.ForEachBackend(t, func(t *testing.T, dev *tensor.Device) {
		var losses [2][]uint32
		for i, recompute := range []bool{false, true} {
			m := newMLPBlock(dev)
			block := m.forward
			if recompute {
				block = m.checkpointed
			}
			stats := trainSmallModel(dev, m.params(), trainSteps, func() *tensor.Tensor {
				x := blockInput(dev, false)
				return blockLoss(block(block(x))) // the block twice: a two-layer stack
			})
			checkSteadyState(t, stats, m.params())
			for _, st := range stats {
				losses[i] = append(losses[i], math.Float32bits(st.loss))
			}
		}
		if i := firstDiff(losses[1], losses[0]); i >= 0 {
			t.Errorf("step %d: the loss with recomputation differs from the plain loss", i+1)
		}
		results[dev.String()] = map[string][]uint32{"losses": losses[1]}
	})
	compareBackends(t, results)
}

// TestCheckpointEdgeCases: a segment that returns its input, and one run without
// gradient recording (evaluation).
func TestCheckpointEdgeCases(t *testing.T) {
	testutil.ForEachBackend(t, func(t *testing.T, dev *tensor.Device) {
		s := dev.NewScope()
		defer s.Close()
		x := blockInput(dev, true)
		in := []*tensor.Tensor{x}
		y := tensor.Checkpoint(func(in []*tensor.Tensor) []*tensor.Tensor { return in }, in...)[0]
		if in[0] != x {
			t.Errorf("Checkpoint replaced the caller's input slice")
		}
		tensor.Sum(tensor.Scale(y, 2)).Backward()
		for i, g := range tensor.ToSlice[float32](x.Grad()) {
			if g != 2 {
				t.Fatalf("identity segment: grad[%d] = %v, want 2", i, g)
			}
		}

		m := newMLPBlock(dev)
		before := dev.Stats().InUse
		var out *tensor.Tensor
		dev.NoGrad(func() { out = m.checkpointed(x) })
		if out.RequiresGrad() {
			t.Errorf("Checkpoint under NoGrad recorded a graph")
		}
		if held := dev.Stats().InUse - before; held != int64(out.Numel()*4) {
			t.Errorf("Checkpoint under NoGrad holds %d bytes, want its output's %d", held, out.Numel()*4)
		}
		if i := firstDiff(bits(out), bits(m.forward(x))); i >= 0 {
			t.Errorf("Checkpoint under NoGrad differs from the plain forward at element %d", i)
		}
	})
}
