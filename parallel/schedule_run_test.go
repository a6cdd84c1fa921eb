package parallel

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"megago/tensor"
)

// The schedules are run on a toy model of toyLayers layers, each x ↦ tanh(x·W_l) on
// [T, toyC] activations whose T varies by micro-batch (so the p2p shape headers matter),
// with a squared-error loss. The reference is the whole model on one rank without
// pipelining.

const (
	toyLayers = 8
	toyC      = 4
)

// toyLayout says which layers chunk v of stage r holds: L/(p·V) layers from
// v·L/V + r·L/(p·V), as Megatron assigns them.
func toyLayout(p, v, r, chunk int) (first, n int) {
	n = toyLayers / (p * v)
	return chunk*toyLayers/v + r*n, n
}

func toyWeight(dev *tensor.Device, l int) *tensor.Tensor {
	return tensor.NewRNG(5).Fold(uint64(l)).Normal(dev, tensor.F64, tensor.Whole(toyC, toyC), 0, 0.7).SetRequiresGrad(true)
}

// toyData returns micro-batch m's input and target, [T, C] with T = 2 + m mod 3.
func toyData(dev *tensor.Device, m int) (x, y *tensor.Tensor) {
	t := 2 + m%3
	rng := tensor.NewRNG(11).Fold(uint64(m))
	return rng.Named("x").Normal(dev, tensor.F64, tensor.Whole(t, toyC), 0, 1),
		rng.Named("y").Normal(dev, tensor.F64, tensor.Whole(t, toyC), 0, 1)
}

type toyResult struct {
	losses  []float64
	grads   map[int][]float64 // layer → gradient
	maxLive []int             // per stage: most micro-batches alive at once
	scopes  []int64           // per stage: storage still in use after the step beyond the weights
}

// runToy trains one step of the toy model under s on p goroutine stages (eval: forward
// only) and returns the losses, gradients and live-activation counts.
func runToy(t *testing.T, p int, s Schedule, eval bool) toyResult {
	t.Helper()
	res := toyResult{grads: map[int][]float64{}, maxLive: make([]int, p), scopes: make([]int64, p)}
	var mu sync.Mutex
	err := RunLocal(p, func(c Comm) error {
		ctx := context.Background()
		dev := tensor.NewCPU()
		r, v := c.Rank(), s.Chunks()
		weights := map[int]*tensor.Tensor{}
		chunks := make([][]int, v)
		for ch := range v {
			first, n := toyLayout(p, v, r, ch)
			for l := first; l < first+n; l++ {
				weights[l] = toyWeight(dev, l)
				chunks[ch] = append(chunks[ch], l)
			}
		}
		base := dev.Stats().InUse
		pl, err := NewPipeline(ctx, c, dev, P2PShape{})
		if err != nil {
			return err
		}
		var acts []*tensor.Tensor // one per forward step: its first layer's output
		maxLive := 0
		fwd := func(st Step) (*tensor.Tensor, error) {
			x := st.Input
			var tgt *tensor.Tensor
			if x == nil {
				x, _ = toyData(dev, st.Micro)
			} else if !eval && !x.RequiresGrad() {
				return nil, fmt.Errorf("input of %d.%d does not require grad", st.Micro, st.Chunk)
			}
			for i, l := range chunks[st.Chunk] {
				x = tensor.Tanh(tensor.MatMul(x, weights[l]))
				if i == 0 {
					acts = append(acts, x)
				}
			}
			live := 0
			for _, a := range acts {
				if !a.Released() {
					live++
				}
			}
			maxLive = max(maxLive, live)
			if !st.Last {
				return x, nil
			}
			_, tgt = toyData(dev, st.Micro)
			d := tensor.Sub(x, tgt)
			return tensor.Mean(tensor.Mul(d, d)), nil
		}
		var losses []float64
		if eval {
			losses, err = pl.Eval(ctx, s, fwd, nil)
		} else {
			losses, err = pl.Train(ctx, s, fwd, Hooks{})
		}
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		if losses != nil {
			res.losses = losses
		}
		res.maxLive[r] = maxLive
		res.scopes[r] = dev.Stats().InUse - base
		for l, w := range weights {
			if w.Grad() != nil {
				res.grads[l] = tensor.ToSlice[float64](w.Grad())
				res.scopes[r] -= int64(8 * w.Numel())
			}
		}
		return nil
	})
	require.NoError(t, err)
	return res
}

// TestSchedulesBitIdentical: 1F1B on 1, 2 and 4 stages and the interleaved schedule on 2
// and 4 stages give the same losses and gradients, bit for bit, as running the whole
// model without pipelining: the arithmetic is the same, only its order across stages
// differs. Every micro-batch's activations are released by the end of the step.
func TestSchedulesBitIdentical(t *testing.T) {
	const m = 8
	ref := runToy(t, 1, NoPipelining{M: m}, false)
	require.Len(t, ref.losses, m)
	require.Len(t, ref.grads, toyLayers)
	for _, tc := range []struct {
		p int
		s Schedule
	}{
		{1, OneFOneB{M: m}},
		{2, OneFOneB{M: m}},
		{4, OneFOneB{M: m}},
		{2, Interleaved{M: m, V: 2}},
		{2, Interleaved{M: m, V: 4, G: 3}},
		{4, Interleaved{M: m, V: 2}},
	} {
		t.Run(fmt.Sprintf("%v-p%d", tc.s, tc.p), func(t *testing.T) {
			got := runToy(t, tc.p, tc.s, false)
			assert.Equal(t, ref.losses, got.losses)
			for l := range toyLayers {
				assert.Equal(t, ref.grads[l], got.grads[l], "layer %d", l)
			}
			for r, n := range got.scopes {
				assert.Zero(t, n, "stage %d: bytes still held after the step", r)
			}
		})
	}
}

// TestOneFOneBLiveActivations counts, at every forward step, the micro-batches whose
// activations have not been released: rank r of p never holds more than min(p−r, M), and
// reaches it.
func TestOneFOneBLiveActivations(t *testing.T) {
	for _, tc := range []struct{ p, m int }{{4, 8}, {4, 2}, {2, 5}} {
		t.Run(fmt.Sprintf("p%d-m%d", tc.p, tc.m), func(t *testing.T) {
			got := runToy(t, tc.p, OneFOneB{M: tc.m}, false)
			for r := range tc.p {
				assert.Equal(t, min(tc.p-r, tc.m), got.maxLive[r], "stage %d", r)
			}
		})
	}
}

// TestEvalIsForwardOnly: the forward-only schedules return the training losses, leave
// no gradient, and hold one micro-batch at a time.
func TestEvalIsForwardOnly(t *testing.T) {
	const m = 4
	ref := runToy(t, 1, NoPipelining{M: m}, false)
	for _, tc := range []struct {
		p int
		s Schedule
	}{{1, NoPipelining{M: m}}, {4, OneFOneB{M: m}}, {2, Interleaved{M: m, V: 2}}} {
		t.Run(fmt.Sprintf("%v-p%d", tc.s, tc.p), func(t *testing.T) {
			got := runToy(t, tc.p, tc.s, true)
			assert.Equal(t, ref.losses, got.losses)
			assert.Empty(t, got.grads)
			for r := range tc.p {
				assert.Equal(t, 1, got.maxLive[r], "stage %d", r)
				assert.Zero(t, got.scopes[r], "stage %d", r)
			}
		})
	}
}

// TestScheduleHooks: LastBackward comes once per chunk, just before the last
// micro-batch's backward step through it; ScaleLoss sees loss/M; AfterBackward follows
// every backward step.
func TestScheduleHooks(t *testing.T) {
	const m = 4
	err := RunLocal(2, func(c Comm) error {
		ctx := context.Background()
		dev := tensor.NewCPU()
		pl, err := NewPipeline(ctx, c, dev, P2PShape{})
		if err != nil {
			return err
		}
		w := toyWeight(dev, 0)
		var log []string
		fwd := func(st Step) (*tensor.Tensor, error) {
			x := st.Input
			if x == nil {
				x, _ = toyData(dev, st.Micro)
			}
			y := tensor.MatMul(x, w)
			if st.Last {
				return tensor.AddScalar(tensor.Scale(tensor.Sum(y), 0), float64(st.Micro+1)), nil
			}
			return y, nil
		}
		h := Hooks{
			LastBackward:  func(ch int) { log = append(log, fmt.Sprintf("last%d", ch)) },
			AfterBackward: func(mb, ch int) { log = append(log, fmt.Sprintf("B%d.%d", mb, ch)) },
			ScaleLoss: func(l *tensor.Tensor) *tensor.Tensor {
				log = append(log, fmt.Sprintf("loss%g", l.Item()))
				return l
			},
		}
		losses, err := pl.Train(ctx, Interleaved{M: m, V: 2}, fwd, h)
		if err != nil {
			return err
		}
		var want string
		if c.Rank() == 1 {
			if !assert.Equal(t, []float64{1, 2, 3, 4}, losses) {
				return nil
			}
			// Stage 1's plan: F0 F1 F0.1 B0.1 F1.1 B1.1 F2 B0 F3 B1 F2.1 B2.1 F3.1 B3.1 B2 B3.
			want = "loss0.25 B0.1 loss0.5 B1.1 B0.0 B1.0 loss0.75 B2.1 loss1 last1 B3.1 B2.0 last0 B3.0"
		} else {
			want = "B0.1 B1.1 B0.0 B1.0 B2.1 last1 B3.1 B2.0 last0 B3.0"
		}
		assert.Equal(t, want, fmt.Sprint(log)[1:len(fmt.Sprint(log))-1], "stage %d", c.Rank())
		return nil
	})
	require.NoError(t, err)
}

// TestPipelineForwardError: an error in one stage's forward step fails that rank with the
// step named, and the in-process transport stops the others instead of hanging.
func TestPipelineForwardError(t *testing.T) {
	err := RunLocal(2, func(c Comm) error {
		ctx := context.Background()
		dev := tensor.NewCPU()
		pl, err := NewPipeline(ctx, c, dev, P2PShape{})
		if err != nil {
			return err
		}
		w := toyWeight(dev, 0)
		_, err = pl.Train(ctx, OneFOneB{M: 3}, func(st Step) (*tensor.Tensor, error) {
			if c.Rank() == 0 && st.Micro == 1 {
				return nil, fmt.Errorf("no data for micro-batch 1")
			}
			x := st.Input
			if x == nil {
				x, _ = toyData(dev, st.Micro)
			}
			y := tensor.MatMul(x, w)
			if st.Last {
				return tensor.Sum(y), nil
			}
			return y, nil
		}, Hooks{})
		return err
	})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "rank 0: parallel: pipeline stage 0, step 1 (F1): no data for micro-batch 1")
	assert.Contains(t, err.Error(), "rank 1:")
}

func TestPipelinePanicBecomesError(t *testing.T) {
	err := RunLocal(1, func(c Comm) error {
		pl, err := NewPipeline(context.Background(), c, tensor.NewCPU(), P2PShape{})
		if err != nil {
			return err
		}
		_, err = pl.Train(context.Background(), NoPipelining{M: 1}, func(Step) (*tensor.Tensor, error) {
			return tensor.Ones(tensor.NewCPU(), tensor.F32, 2), nil // not a scalar
		}, Hooks{})
		return err
	})
	require.ErrorContains(t, err, "not a scalar loss")
}
