package tensor_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"megago/tensor"
)

// TestStoreSlotsMatchesCopyNarrow: StoreSlots writes what CopyNarrowFrom of each
// sequence's permuted positions writes, for sequences of 0, 1 and several positions
// into slots shared or not, and leaves the other positions as they were.
func TestStoreSlotsMatchesCopyNarrow(t *testing.T) {
	const g, l, hs = 3, 9, 4
	for _, tc := range []struct {
		slot, at, n []int
	}{
		{slot: []int{0}, at: []int{0}, n: []int{1}},
		{slot: []int{2, 0, 1}, at: []int{5, 0, 8}, n: []int{1, 1, 1}},
		{slot: []int{1, 0, 2}, at: []int{2, 3, 0}, n: []int{4, 0, 9}},
		{slot: []int{0, 0}, at: []int{0, 6}, n: []int{3, 2}}, // one slot, two ranges
	} {
		t.Run(fmt.Sprint(tc.n), func(t *testing.T) {
			dev := tensor.NewCPU()
			r := rand.New(rand.NewPCG(1, uint64(len(tc.n))))
			total := 0
			for _, n := range tc.n {
				total += n
			}
			x := make([]float32, total*g*hs)
			for i := range x {
				x[i] = float32(r.NormFloat64())
			}
			src := tensor.FromSlice(dev, x, 1, total, g, hs)
			slots := func() []*tensor.Tensor {
				s := make([]*tensor.Tensor, 3)
				for i := range s {
					s[i] = tensor.Full(dev, tensor.F32, math.Pi, 1, g, l, hs)
				}
				return s
			}
			want, got := slots(), slots()
			off := 0
			pick := make([]*tensor.Tensor, len(tc.n))
			for i, n := range tc.n {
				if n > 0 {
					want[tc.slot[i]].CopyNarrowFrom(2, tc.at[i], src.Narrow(1, off, n).Permute(0, 2, 1, 3))
				}
				pick[i] = got[tc.slot[i]]
				off += n
			}
			tensor.StoreSlots(pick, tc.at, tc.n, src)
			for i := range want {
				require.Equal(t, tensor.ToSlice[float32](want[i]), tensor.ToSlice[float32](got[i]), "slot %d", i)
			}
		})
	}
}

func TestStoreSlotsPanics(t *testing.T) {
	dev := tensor.NewCPU()
	src := tensor.Zeros(dev, tensor.F32, 1, 2, 3, 4)
	slot := tensor.Zeros(dev, tensor.F32, 1, 3, 5, 4)
	two := []*tensor.Tensor{slot, slot}
	require.Panics(t, func() { tensor.StoreSlots(two, []int{0}, []int{1, 1}, src) })     // lengths
	require.Panics(t, func() { tensor.StoreSlots(two, []int{0, 0}, []int{1, 2}, src) })  // Σ n ≠ N
	require.Panics(t, func() { tensor.StoreSlots(two, []int{0, 5}, []int{1, 1}, src) })  // past the slot
	require.Panics(t, func() { tensor.StoreSlots(two, []int{0, -1}, []int{1, 1}, src) }) // negative start
	other := []*tensor.Tensor{slot, tensor.Zeros(dev, tensor.F32, 1, 2, 5, 4)}           // heads differ
	require.Panics(t, func() { tensor.StoreSlots(other, []int{0, 0}, []int{1, 1}, src) })
	f64 := []*tensor.Tensor{slot, tensor.Zeros(dev, tensor.F64, 1, 3, 5, 4)}
	require.Panics(t, func() { tensor.StoreSlots(f64, []int{0, 0}, []int{1, 1}, src) }) // dtypes differ
}
