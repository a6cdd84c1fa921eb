package gorgonia_test

import (
	"fmt"

	gtensor "gorgonia.org/tensor"

	"megago/tensor"
	"megago/tensor/gorgonia"
)

// A gorgonia transpose is lazy: it only records new strides. FromDense reads the tensor in
// its logical order.
func ExampleFromDense() {
	d := gtensor.New(gtensor.WithShape(2, 3), gtensor.WithBacking([]float64{1, 2, 3, 4, 5, 6}))
	if err := d.T(); err != nil {
		panic(err)
	}
	t, err := gorgonia.FromDense(tensor.NewCPU(), d)
	if err != nil {
		panic(err)
	}
	fmt.Println(t.Shape(), tensor.ToSlice[float64](t))

	_, err = gorgonia.FromDense(tensor.NewCPU(), gtensor.New(gtensor.WithShape(2), gtensor.WithBacking([]bool{true, false})))
	fmt.Println(err)
	// Output:
	// [3 2] [1 4 2 5 3 6]
	// gorgonia: FromDense: dtype bool of a (2) dense tensor has no megago equivalent (want float64, float32, int32, int64 or int)
}

func ExampleToDense() {
	x := tensor.FromSlice(tensor.NewCPU(), []float64{1, 2, 3, 4, 5, 6}, 2, 3).Cast(tensor.BF16)
	d := gorgonia.ToDense(x)
	fmt.Println(d.Dtype(), d.Shape(), d.Data())
	// Output:
	// float32 (2, 3) [1 2 3 4 5 6]
}
