package tensor_test

import (
	"fmt"

	"megago/tensor"
)

// Cast to bfloat16 keeps 8 significant bits and rounds to nearest, ties to even: 1+2⁻⁸
// lies halfway between 1 and 1+2⁻⁷ and goes to 1 (even); 1+3·2⁻⁸ lies halfway between
// 1+2⁻⁷ and 1+2⁻⁶ and goes to 1+2⁻⁶ = 1.015625; π, in [2, 4) where bfloat16's spacing
// is 2⁻⁶, becomes 201·2⁻⁶ = 3.140625; 300.7, where the spacing is 2, becomes 300. The
// gradient flows back cast to the input's dtype: L = Σ yᵢ/2 gives 0.5 for every x.
func ExampleTensor_Cast() {
	dev := tensor.NewCPU()
	x := tensor.FromSlice(dev, []float32{1, 1.00390625, 1.01171875, 3.14159265, 300.7}, 5).SetRequiresGrad(true)
	y := x.Cast(tensor.BF16)
	fmt.Println(y.DType(), tensor.ToSlice[float32](y))

	tensor.Sum(tensor.Scale(y, 0.5)).Backward()
	fmt.Println(x.Grad().DType(), tensor.ToSlice[float32](x.Grad()))
	// Output:
	// bfloat16 [1 1 1.015625 3.140625 300]
	// float32 [0.5 0.5 0.5 0.5 0.5]
}
