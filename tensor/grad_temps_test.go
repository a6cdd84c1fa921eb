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

// Weight gradients that MatMul and Embedding write straight into the leaf's Grad add up
// over backward passes, start afresh after ZeroGrad (which defers its zeros), and equal
// the sums of products written out by hand.
func TestDirectWeightGradients(t *testing.T) {
	dev := tensor.NewCPU()
	const rows, in, out, vocab = 6, 4, 3, 5
	xs, ws, emb := make([]float32, rows*in), make([]float32, out*in), make([]float32, vocab*in)
	for i := range xs {
		xs[i] = float32(i%7) - 3
	}
	for i := range ws {
		ws[i] = float32(i%5)*0.5 - 1
	}
	for i := range emb {
		emb[i] = float32(i % 3)
	}
	ids := []int64{1, 4, 1, 0, 2, 1}
	w := tensor.FromSlice(dev, ws, out, in).SetRequiresGrad(true)
	e := tensor.FromSlice(dev, emb, vocab, in).SetRequiresGrad(true)
	x := tensor.FromSlice(dev, xs, 2, rows/2, in)
	pass := func() { // loss = Σ (x·wᵀ)·c + Σ e[ids]·d, with c, d fixed weights
		y := tensor.MatMulT(x, w, false, true) // [2, 3, out]
		c := tensor.Arange(dev, tensor.F32, 1, 1, out)
		z := tensor.Embedding(e, tensor.FromSlice(dev, ids, rows))
		d := tensor.Arange(dev, tensor.F32, 1, 1, in)
		tensor.Add(tensor.Sum(tensor.Mul(y, c)), tensor.Sum(tensor.Mul(z, d))).Backward()
	}
	// dL/dw[o][i] = Σ_r x[r][i]·(o+1); dL/de[v][i] = (count of v in ids)·(i+1).
	wantW, wantE := make([]float32, out*in), make([]float32, vocab*in)
	for o := range out {
		for i := range in {
			for r := range rows {
				wantW[o*in+i] += xs[r*in+i] * float32(o+1)
			}
		}
	}
	for _, v := range ids {
		for i := range in {
			wantE[int(v)*in+i] += float32(i + 1)
		}
	}
	scaled := func(s []float32, k float32) []float32 {
		r := make([]float32, len(s))
		for i := range s {
			r[i] = s[i] * k
		}
		return r
	}
	pass()
	pass()
	assert.Equal(t, scaled(wantW, 2), tensor.ToSlice[float32](w.Grad()), "two passes add up")
	assert.Equal(t, scaled(wantE, 2), tensor.ToSlice[float32](e.Grad()))
	w.ZeroGrad()
	e.ZeroGrad()
	pass()
	assert.Equal(t, wantW, tensor.ToSlice[float32](w.Grad()), "a pass after ZeroGrad stores")
	assert.Equal(t, wantE, tensor.ToSlice[float32](e.Grad()))
	w.ZeroGrad()
	assert.Equal(t, make([]float32, out*in), tensor.ToSlice[float32](w.Grad()), "Grad writes the deferred zeros")
}
