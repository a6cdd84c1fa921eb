package tensor_test

import (
	"fmt"

	"megago/tensor"
)

// The end of a pre-LN sub-block: the branch output h gets its bias, dropout and the
// residual add in one pass, and the next block's norm reads the new residual stream in
// another, which also returns it.
func ExampleAddLayerNorm() {
	dev := tensor.NewCPU()
	x := tensor.FromSlice(dev, []float32{1, 2, 3, 4}, 1, 1, 4)  // residual stream [B, T, C]
	h := tensor.FromSlice(dev, []float32{1, 0, -1, 0}, 1, 1, 4) // branch output, before its bias
	bias := tensor.FromSlice(dev, []float32{0, 0, 0, 1}, 4)

	// p = 0, as in evaluation: nothing is dropped.
	sum := tensor.BiasDropoutAdd(h, bias, x, 0, tensor.NewRNG(1), h.Shape(), []int{0, 0, 0})
	y, stream := tensor.AddLayerNorm(sum, nil, nil, nil, 1e-5) // no residual: stream is sum
	fmt.Println("stream:", tensor.ToSlice[float32](stream))
	fmt.Printf("normalized: %.3f\n", tensor.ToSlice[float32](y))
	fmt.Println("fused add-norm calls:", dev.FusedCount(tensor.FusedAddNorm))
	// Output:
	// stream: [2 2 2 5]
	// normalized: [-0.577 -0.577 -0.577 1.732]
	// fused add-norm calls: 1
}
