package tensor_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"megago/tensor"
)

// TestAttentionSlotsIntoViews: AttentionSlotsInto writing into views of one tensor (rows
// of a [1, N, NH·HS] buffer for one-query calls) gives AttentionSlots' outputs bit for
// bit, with a call of several queries in another tensor between them, and writes nothing
// outside its outputs.
func TestAttentionSlotsIntoViews(t *testing.T) {
	const g, nh, l, hs = 2, 4, 40, 16
	dev := tensor.NewCPU()
	r := rand.New(rand.NewPCG(3, 5))
	rnd := func(shape ...int) *tensor.Tensor { return normalF32(dev, r, shape...) }
	tq := []int{1, 3, 1}   // queries per call
	n := []int{17, 40, 33} // positions of each slot attended
	var qs, ks, vs []*tensor.Tensor
	for i := range tq {
		qs = append(qs, rnd(1, nh, tq[i], hs))
		ks, vs = append(ks, rnd(1, g, l, hs)), append(vs, rnd(1, g, l, hs))
	}
	o := tensor.AttentionOptions{Scale: 0.25, Causal: true}
	want := tensor.AttentionSlots(qs, ks, vs, n, o)

	rows := tensor.Full(dev, tensor.F32, math.Pi, 1, 4, nh*hs) // rows 0 and 2 written, 1 and 3 not
	outs := []*tensor.Tensor{
		rows.Narrow(1, 0, 1).Reshape(1, nh, 1, hs),
		tensor.Empty(dev, tensor.F32, 1, nh, 3, hs),
		rows.Narrow(1, 2, 1).Reshape(1, nh, 1, hs),
	}
	tensor.AttentionSlotsInto(outs, qs, ks, vs, n, o)
	got := tensor.ToSlice[float32](rows)
	require.Equal(t, tensor.ToSlice[float32](want[0]), got[:nh*hs])
	require.Equal(t, tensor.ToSlice[float32](want[1]), tensor.ToSlice[float32](outs[1]))
	require.Equal(t, tensor.ToSlice[float32](want[2]), got[2*nh*hs:3*nh*hs])
	for _, x := range append(got[nh*hs:2*nh*hs:2*nh*hs], got[3*nh*hs:]...) {
		require.Equal(t, float32(math.Pi), x)
	}

	wrong := []*tensor.Tensor{outs[0], tensor.Empty(dev, tensor.F32, 1, nh, 2, hs), outs[2]}
	require.Panics(t, func() { tensor.AttentionSlotsInto(wrong, qs, ks, vs, n, o) })
	require.Panics(t, func() { tensor.AttentionSlotsInto(outs[:2], qs, ks, vs, n, o) })
	f64 := []*tensor.Tensor{outs[0], tensor.Empty(dev, tensor.F64, 1, nh, 3, hs), outs[2]}
	require.Panics(t, func() { tensor.AttentionSlotsInto(f64, qs, ks, vs, n, o) })
}

// normalF32 returns an F32 tensor of shape on dev, its elements standard normal draws of r.
func normalF32(dev *tensor.Device, r *rand.Rand, shape ...int) *tensor.Tensor {
	x := make([]float32, tensor.Shape(shape).Numel())
	for j := range x {
		x[j] = float32(r.NormFloat64())
	}
	return tensor.FromSlice(dev, x, shape...)
}
