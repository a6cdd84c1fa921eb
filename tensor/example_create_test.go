package tensor_test

import (
	"fmt"

	"megago/tensor"
)

// Tensors are made from Go slices and read back into them; the slice's element type
// gives the dtype, and ToSlice converts to the type asked for. Reshape of a contiguous
// tensor is a view: it shares storage and copies nothing.
func ExampleFromSlice() {
	dev := tensor.NewCPU()
	x := tensor.FromSlice(dev, []float32{1, 2, 3, 4, 5, 6}, 2, 3) // [2, 3]
	fmt.Println(x.DType(), x.Shape(), x.Numel())
	fmt.Println(tensor.ToSlice[float64](x))

	v := x.Reshape(3, 2) // [3, 2], the same storage
	fmt.Println(v)
	ids := tensor.FromSlice(dev, []int32{7, 0, 3}, 3)
	fmt.Println(ids.DType(), tensor.ToSlice[int64](ids))
	fmt.Println(tensor.Scalar(dev, tensor.F64, 2.5).Item())
	// Output:
	// float32 [2 3] 6
	// [1 2 3 4 5 6]
	// tensor(float32 [3 2] [1 2 3 4 5 6])
	// int32 [7 0 3]
	// 2.5
}

// Devices are values: Open returns a new device on a registered backend ("cpu" is
// always there; importing megago/cuda adds "cuda"), NewCPU the CPU one directly. Each
// has its own memory pool, scopes and gradient mode, so each rank gets its own.
func ExampleOpen() {
	dev, err := tensor.Open("cpu")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(dev, tensor.NewCPU())

	_, err = tensor.Open("tpu")
	fmt.Println(err != nil)
	// Output:
	// cpu cpu
	// true
}
