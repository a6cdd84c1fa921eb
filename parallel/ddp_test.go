package parallel

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"megago/tensor"
)

// slowBackward is the identity whose backward pass sleeps, standing for the layers whose
// backward the first bucket's reduction overlaps.
type slowBackward struct{ d time.Duration }

func (s slowBackward) Forward(in []*tensor.Tensor) []*tensor.Tensor {
	return []*tensor.Tensor{in[0].Clone()}
}

func (s slowBackward) Backward(g []*tensor.Tensor) []*tensor.Tensor {
	time.Sleep(s.d)
	return g
}

// flatParams makes n [2, 2] parameters that are views of one flat buffer, with their
// gradients views of another, as optim's Buffer lays them out (64-element aligned).
func flatParams(dev *tensor.Device, n, rank int) (params []*tensor.Tensor, grads *tensor.Tensor) {
	flat := tensor.Zeros(dev, tensor.F64, 64*n)
	grads = tensor.Zeros(dev, tensor.F64, 64*n)
	for i := range n {
		w := flat.Narrow(0, 64*i, 4).Reshape(2, 2)
		w.CopyFrom(ranked(dev, i, rank, 2, 2).Detach())
		w.SetRequiresGrad(true)
		w.SetGrad(grads.Narrow(0, 64*i, 4).Reshape(2, 2))
		params = append(params, w)
	}
	return params, grads
}

// ddpModel is loss = Σ (slow(x·w0)·w1·w2)², so backward reaches w2, w1, sleeps, then w0.
func ddpModel(dev *tensor.Device, w []*tensor.Tensor, micro, rank int, pause time.Duration) *tensor.Tensor {
	x := ranked(dev, 20+micro, rank, 3, 2).Detach()
	h := tensor.Apply("slow", slowBackward{pause}, tensor.MatMul(x, w[0]))[0]
	y := tensor.MatMul(tensor.MatMul(h, w[1]), w[2])
	return tensor.Scale(tensor.Sum(tensor.Mul(y, y)), 1e-6)
}

// TestGradSyncOverlapsBackward: over two DP ranks and two micro-batches, the bucket of
// w2 and w1 starts reducing while backward still runs (during the slow step), the result
// equals averaging the accumulated gradients after backward, bit for bit, and the trace
// records each bucket's reduction.
func TestGradSyncOverlapsBackward(t *testing.T) {
	const pause = 60 * time.Millisecond
	err := RunLocal(2, func(c Comm) error {
		ctx := context.Background()
		dev := tensor.NewCPU()
		r := c.Rank()
		// Reference: accumulate, then average the whole buffer.
		wRef, gRef := flatParams(dev, 3, r)
		for m := range 2 {
			ddpModel(dev, wRef, m, r, 0).Backward()
		}
		if err := c.AllReduce(ctx, gRef, Avg); err != nil {
			return err
		}

		w, grads := flatParams(dev, 3, r)
		var mu sync.Mutex
		started := map[int]time.Time{}
		ranges := [][2]int{{64, 192}, {0, 64}} // bucket 0: w1, w2; bucket 1: w0
		avg := AverageBuckets(c, grads, ranges)
		trace := NewTrace(r, time.Now())
		s := NewGradSync([]GradBucket{{Params: w[1:]}, {Params: w[:1]}}, func(ctx context.Context, k int) error {
			mu.Lock()
			started[k] = time.Now()
			mu.Unlock()
			return avg(ctx, k)
		}, trace)
		defer s.Close()
		ddpModel(dev, w, 0, r, 0).Backward()
		s.Arm(ctx, w)
		ddpModel(dev, w, 1, r, pause).Backward()
		backwardDone := time.Now()
		if err := s.Finish(ctx); err != nil {
			return err
		}
		mu.Lock()
		assert.True(t, started[0].Before(backwardDone.Add(-pause/2)), "rank %d: bucket 0 started %v after backward ended", r, started[0].Sub(backwardDone))
		mu.Unlock()
		assert.Equal(t, tensor.ToSlice[float64](gRef), tensor.ToSlice[float64](grads), "rank %d", r)
		var buckets []int
		for _, e := range trace.Events() {
			if e.Kind == EventReduce {
				buckets = append(buckets, e.Micro)
			}
		}
		assert.Equal(t, []int{0, 1}, buckets)
		return nil
	})
	require.NoError(t, err)
}

// TestGradSyncWithoutArm: nothing is reduced during backward; Finish reduces the eager
// buckets in order and leaves deferred ones alone.
func TestGradSyncWithoutArm(t *testing.T) {
	dev := tensor.NewCPU()
	w, _ := flatParams(dev, 3, 0)
	var order []int
	s := NewGradSync([]GradBucket{{Params: w[:1]}, {Params: w[1:2], Deferred: true}, {Params: w[2:]}},
		func(_ context.Context, k int) error { order = append(order, k); return nil }, nil)
	ddpModel(dev, w, 0, 0, 0).Backward()
	assert.Empty(t, order)
	require.NoError(t, s.Finish(context.Background()))
	assert.Equal(t, []int{0, 2}, order)
	// The next round starts afresh.
	order = nil
	s.Arm(context.Background(), w)
	ddpModel(dev, w, 1, 0, 0).Backward()
	require.NoError(t, s.Finish(context.Background()))
	assert.Equal(t, []int{0, 2}, order)
}

// TestGradSyncGradientAfterReduction: a parameter used in two recomputed segments hears
// twice in one backward pass; Finish reports it instead of reducing a partial gradient
// silently.
func TestGradSyncGradientAfterReduction(t *testing.T) {
	dev := tensor.NewCPU()
	w, _ := flatParams(dev, 1, 0)
	s := NewGradSync([]GradBucket{{Params: w}}, func(context.Context, int) error { return nil }, nil)
	s.Arm(context.Background(), w)
	seg := func(in []*tensor.Tensor) []*tensor.Tensor { return []*tensor.Tensor{tensor.MatMul(in[0], w[0])} }
	x := ranked(dev, 1, 0, 3, 2).Detach()
	y := tensor.Checkpoint(seg, tensor.Checkpoint(seg, x)...)[0]
	tensor.Sum(y).Backward()
	require.ErrorContains(t, s.Finish(context.Background()), "received more gradient after its bucket was complete")
}

// TestGradSyncIdle: Idle offers every bucket until the reducing goroutine takes one; the
// bucket being reduced and those reduced are not offered, deferred ones always are.
func TestGradSyncIdle(t *testing.T) {
	dev := tensor.NewCPU()
	w, _ := flatParams(dev, 3, 0)
	inReduce, release := make(chan int), make(chan struct{})
	s := NewGradSync([]GradBucket{{Params: w[2:]}, {Params: w[1:2]}, {Params: w[:1], Deferred: true}},
		func(_ context.Context, k int) error { inReduce <- k; <-release; return nil }, nil)
	idle := func() (ks []int) {
		s.Idle(func(k int) { ks = append(ks, k) })
		return ks
	}
	assert.Equal(t, []int{0, 1, 2}, idle())
	s.Arm(context.Background(), w)
	done := make(chan struct{})
	go func() { // backward: w2 completes bucket 0 first
		ddpModel(dev, w, 0, 0, 0).Backward()
		close(done)
	}()
	assert.Equal(t, 0, <-inReduce)
	assert.Equal(t, []int{1, 2}, idle(), "bucket 0 is being reduced")
	release <- struct{}{}
	assert.Equal(t, 1, <-inReduce)
	<-done
	assert.Equal(t, []int{2}, idle(), "bucket 0 reduced, bucket 1 being reduced")
	release <- struct{}{}
	require.NoError(t, s.Finish(context.Background()))
}
