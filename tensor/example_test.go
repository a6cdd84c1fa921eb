package tensor_test

import (
	"fmt"

	"megago/tensor"
)

// A linear layer's forward and backward on the CPU, inside a scope that returns the step's
// storage to the pool.
func Example() {
	dev := tensor.NewCPU()
	w := tensor.FromSlice(dev, []float32{1, 2, 3, 4, 5, 6}, 3, 2).SetRequiresGrad(true) // [C, O]

	s := dev.NewScope()
	x := tensor.FromSlice(dev, []float32{1, 0, -1, 2, 1, 0}, 2, 3) // [B, C]
	y := tensor.MatMul(x, w)                                       // [B, O]
	loss := tensor.Sum(tensor.Mul(y, y))
	loss.Backward()
	fmt.Println("loss:", loss.Item())
	s.Close()

	fmt.Println("dL/dw:", tensor.ToSlice[float32](w.Grad()))
	fmt.Println("released with the scope:", y.Released())
	// Output:
	// loss: 121
	// dL/dw: [12 24 10 16 8 8]
	// released with the scope: true
}
