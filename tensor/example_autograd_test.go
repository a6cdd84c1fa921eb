package tensor_test

import (
	"fmt"

	"megago/tensor"
)

// MatMul multiplies the last two dims; MatMulT takes either operand transposed without
// copying it. By hand: [1 2; 3 4]·[5 6; 7 8] = [1·5+2·7 1·6+2·8; 3·5+4·7 3·6+4·8], and
// aᵀ·b = [1·5+3·7 1·6+3·8; 2·5+4·7 2·6+4·8].
func ExampleMatMul() {
	dev := tensor.NewCPU()
	a := tensor.FromSlice(dev, []float32{1, 2, 3, 4}, 2, 2)
	b := tensor.FromSlice(dev, []float32{5, 6, 7, 8}, 2, 2)
	fmt.Println(tensor.MatMul(a, b))
	fmt.Println(tensor.MatMulT(a, b, true, false))
	// Output:
	// tensor(float32 [2 2] [19 22 43 50])
	// tensor(float32 [2 2] [26 30 38 44])
}

// Backward adds gradients into the leaves that require them, so passes accumulate
// until ZeroGrad. For L = Σ wᵢ² the gradient is 2w: [2 -4 6] after one pass, [4 -8 12]
// after two, and after ZeroGrad a new pass stores 2w again.
func ExampleTensor_Backward() {
	dev := tensor.NewCPU()
	w := tensor.FromSlice(dev, []float64{1, -2, 3}, 3).SetRequiresGrad(true)
	loss := func() *tensor.Tensor { return tensor.Sum(tensor.Mul(w, w)) }

	loss().Backward()
	fmt.Println(tensor.ToSlice[float64](w.Grad()))
	loss().Backward()
	fmt.Println(tensor.ToSlice[float64](w.Grad()))
	w.ZeroGrad()
	fmt.Println(tensor.ToSlice[float64](w.Grad()))
	loss().Backward()
	fmt.Println(tensor.ToSlice[float64](w.Grad()))
	// Output:
	// [2 -4 6]
	// [4 -8 12]
	// [0 0 0]
	// [2 -4 6]
}

// NoGrad turns off graph recording on a device, as torch.no_grad() does: an evaluation
// or an optimizer update records nothing even where its inputs require grad.
func ExampleDevice_NoGrad() {
	dev := tensor.NewCPU()
	w := tensor.FromSlice(dev, []float32{1, 2}, 2).SetRequiresGrad(true)
	fmt.Println(tensor.Scale(w, 3).RequiresGrad())
	dev.NoGrad(func() {
		y := tensor.Scale(w, 3)
		fmt.Println(y.RequiresGrad(), dev.GradEnabled(), y)
	})
	fmt.Println(dev.GradEnabled())
	// Output:
	// true
	// false false tensor(float32 [2] [3 6])
	// true
}
