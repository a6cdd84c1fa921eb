package tensor_test

import (
	"fmt"
	"slices"

	"megago/tensor"
)

// An RNG is a key, not a stream: derived from a seed with Named and Fold (purpose,
// layer, step, ...), never from a rank, and each element's value depends only on the key
// and the element's index in the whole tensor. So a tensor-parallel shard drawn for its
// Region holds exactly the values of the same elements of the whole draw, and a draw can
// be repeated in any order, on any layout.
func ExampleRNG() {
	dev := tensor.NewCPU()
	init := tensor.NewRNG(1234).Named("init").Fold(0) // layer 0's weights
	whole := init.Uniform(dev, tensor.F32, tensor.Whole(4, 6), -1, 1)

	// The second of two TP ranks holds columns 3..5 of the [4, 6] weight.
	shard := init.Uniform(dev, tensor.F32, tensor.Region{Full: tensor.Shape{4, 6}, Start: []int{0, 3}, Size: tensor.Shape{4, 3}}, -1, 1)
	fmt.Println("the shard is the slice of the whole draw:", tensor.AllClose(shard, whole.Narrow(1, 3, 3), 0, 0))

	again := tensor.NewRNG(1234).Named("init").Fold(0).Uniform(dev, tensor.F32, tensor.Whole(4, 6), -1, 1)
	fmt.Println("the same key draws the same values:", tensor.AllClose(again, whole, 0, 0))
	other := tensor.NewRNG(1234).Named("init").Fold(1).Uniform(dev, tensor.F32, tensor.Whole(4, 6), -1, 1)
	fmt.Println("another layer draws other values:", !tensor.AllClose(other, whole, 0, 0))

	v := tensor.ToSlice[float32](whole)
	fmt.Println("all in [-1, 1):", slices.Min(v) >= -1 && slices.Max(v) < 1)
	// Output:
	// the shard is the slice of the whole draw: true
	// the same key draws the same values: true
	// another layer draws other values: true
	// all in [-1, 1): true
}

// Dropout on a shard: DropoutRegion takes the shard's place in the full tensor, so the
// two TP ranks holding halves of the hidden dim drop exactly what one rank holding the
// whole drops. Plain Dropout would take the shard for the whole tensor and draw another
// mask. Kept elements are scaled by 1/(1−p): with p = 0.5, every output is 0 or 2.
func ExampleDropoutRegion() {
	dev := tensor.NewCPU()
	rng := tensor.NewRNG(7).Named("dropout").Fold(3) // step 3
	x := tensor.Ones(dev, tensor.F32, 4, 8)          // [B, C]
	whole := tensor.Dropout(x, 0.5, rng)

	full := tensor.Shape{4, 8}
	left := tensor.DropoutRegion(x.Narrow(1, 0, 4), 0.5, rng, full, []int{0, 0})  // rank 0: C 0..3
	right := tensor.DropoutRegion(x.Narrow(1, 4, 4), 0.5, rng, full, []int{0, 4}) // rank 1: C 4..7
	fmt.Println("the shards' masks make the whole mask:", tensor.AllClose(tensor.Concat(1, left, right), whole, 0, 0))
	fmt.Println("plain Dropout on a shard draws another mask:", !tensor.AllClose(tensor.Dropout(x.Narrow(1, 4, 4), 0.5, rng), right, 0, 0))

	v := tensor.ToSlice[float32](whole)
	slices.Sort(v)
	fmt.Println("values:", slices.Compact(v))
	// Output:
	// the shards' masks make the whole mask: true
	// plain Dropout on a shard draws another mask: true
	// values: [0 2]
}
