package tensor_test

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"megago/tensor"
)

// TestAttentionSlotsRowsMatchesSlots: AttentionSlotsRows over a step's query rows gives,
// row by row, AttentionSlots' outputs for each row's [1, NH, 1, HS] query bit for bit
// (slots of different key/value head counts and lengths attended), and panics on a
// mismatched shape, length or slot.
func TestAttentionSlotsRowsMatchesSlots(t *testing.T) {
	const nh, l, hs = 4, 40, 16
	dev := tensor.NewCPU()
	r := rand.New(rand.NewPCG(7, 11))
	rnd := func(shape ...int) *tensor.Tensor { return normalF32(dev, r, shape...) }
	n := []int{17, 40, 1, 33} // positions of each slot attended
	g := []int{2, 4, 1, 2}    // key/value heads of each slot
	q := rnd(1, len(n), nh, hs)
	var qs, ks, vs []*tensor.Tensor
	for i := range n {
		qs = append(qs, tensor.FromSlice(dev, tensor.ToSlice[float32](q)[i*nh*hs:(i+1)*nh*hs], 1, nh, 1, hs))
		ks, vs = append(ks, rnd(1, g[i], l, hs)), append(vs, rnd(1, g[i], l, hs))
	}
	o := tensor.AttentionOptions{Scale: 0.25, Causal: true}
	want := tensor.AttentionSlots(qs, ks, vs, n, o)

	out := tensor.Empty(dev, tensor.F32, 1, len(n), nh*hs)
	tensor.AttentionSlotsRows(out, q, ks, vs, n, o)
	got := tensor.ToSlice[float32](out)
	for i := range n {
		require.Equal(t, tensor.ToSlice[float32](want[i]), got[i*nh*hs:(i+1)*nh*hs], "row %d", i)
	}

	for name, f := range map[string]func(){
		"out shape": func() { tensor.AttentionSlotsRows(tensor.Empty(dev, tensor.F32, 1, len(n), nh, hs), q, ks, vs, n, o) },
		"out dtype": func() { tensor.AttentionSlotsRows(tensor.Empty(dev, tensor.F64, 1, len(n), nh*hs), q, ks, vs, n, o) },
		"lengths":   func() { tensor.AttentionSlotsRows(out, q, ks, vs, n[:3], o) },
		"rows":      func() { tensor.AttentionSlotsRows(out, q, ks[:3], vs[:3], n[:3], o) },
		"positions": func() { tensor.AttentionSlotsRows(out, q, ks, vs, []int{17, 41, 1, 33}, o) },
		"heads":     func() { tensor.AttentionSlotsRows(out, q, append(ks[:3:3], rnd(1, 3, l, hs)), vs, n, o) },
		"head size": func() { tensor.AttentionSlotsRows(out, q, append(ks[:3:3], rnd(1, 2, l, 8)), vs, n, o) },
		"options":   func() { tensor.AttentionSlotsRows(out, q, ks, vs, n, tensor.AttentionOptions{Dropout: 0.1}) },
		"slot dtype": func() {
			tensor.AttentionSlotsRows(out, q, ks, append(vs[:3:3], tensor.Empty(dev, tensor.F64, 1, 2, l, hs)), n, o)
		},
	} {
		require.Panics(t, f, name)
	}
}
