package tensor_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"megago/tensor"
)

// A backward pass through a chain of n ops keeps every activation until the scope closes,
// but each intermediate gradient only until the next op's backward has used it: the peak
// grows by a few gradients, not by n.
func TestBackwardReleasesIntermediateGradients(t *testing.T) {
	const n, size = 24, 1 << 12 // 24 tanh ops on 4096 float32 = 16 KiB each
	dev := tensor.NewCPU()
	x := tensor.Full(dev, tensor.F32, 0.5, size).SetRequiresGrad(true)
	scope := dev.NewScope()
	defer scope.Close()
	y := x
	for range n {
		y = tensor.Tanh(y)
	}
	loss := tensor.Sum(y)
	before := dev.Stats()
	loss.Backward()
	after := dev.Stats()
	const tensorBytes = size * 4
	grew := after.Peak - before.InUse
	assert.LessOrEqual(t, grew, int64(4*tensorBytes),
		"backward through %d ops raised the peak by %d bytes: more than 4 gradients of %d bytes", n, grew, tensorBytes)

	// The gradient is still right: d/dx of tanh∘…∘tanh at 0.5 by the chain rule in float64.
	want, v := 1.0, 0.5
	for range n {
		v = math.Tanh(v)
		want *= 1 - v*v
	}
	assert.InDelta(t, want, tensor.ToSlice[float64](x.Grad())[0], 1e-5)
}

// Gradients a backward function hands on to several inputs (Add gives dy to both), and the
// caller's dy, survive the pass.
func TestBackwardKeepsSharedAndCallerGradients(t *testing.T) {
	dev := tensor.NewCPU()
	scope := dev.NewScope()
	defer scope.Close()
	a := tensor.FromSlice(dev, []float32{1, 2, 3}).SetRequiresGrad(true)
	b := tensor.FromSlice(dev, []float32{4, 5, 6}).SetRequiresGrad(true)
	s := tensor.Add(tensor.Mul(a, b), tensor.Add(a, b)) // ds/da = b+1, ds/db = a+1
	dy := tensor.FromSlice(dev, []float32{1, 10, 100})
	s.BackwardWithGrad(dy)
	require.False(t, dy.Released(), "the caller's gradient was released")
	assert.Equal(t, []float32{1, 10, 100}, tensor.ToSlice[float32](dy))
	assert.Equal(t, []float32{5, 60, 700}, tensor.ToSlice[float32](a.Grad()))
	assert.Equal(t, []float32{2, 30, 400}, tensor.ToSlice[float32](b.Grad()))
}
