package tensor_test

import (
	"fmt"

	"megago/tensor"
)

// A training step runs inside a scope: the tensors it creates go back to the device's
// pool when the scope closes, so the next step reuses the same storage instead of
// waiting for the garbage collector. Keep moves a tensor out to the enclosing scope
// (here, out of all scopes) so that it survives Close; using a released tensor panics.
func ExampleDevice_NewScope() {
	dev := tensor.NewCPU()
	w := tensor.FromSlice(dev, []float32{1, 2, 3, 4}, 2, 2) // a parameter: outside any scope

	var fresh []int64
	var kept *tensor.Tensor
	for step := range 3 {
		s := dev.NewScope()
		x := tensor.Ones(dev, tensor.F32, 2, 2)
		y := tensor.MatMul(x, w) // [[1+3, 2+4], [1+3, 2+4]]
		loss := tensor.Sum(y)    // 4+6+4+6
		if step == 2 {
			kept = loss.Keep()
		}
		s.Close()
		fmt.Println("step", step, "x released:", x.Released(), "y released:", y.Released())
		fresh = append(fresh, dev.Stats().Fresh)
	}
	fmt.Println("kept:", kept.Item(), "released:", kept.Released())
	fmt.Println("no new storage after the first step:", fresh[1] == fresh[0] && fresh[2] == fresh[0])
	// Output:
	// step 0 x released: true y released: true
	// step 1 x released: true y released: true
	// step 2 x released: true y released: true
	// kept: 20 released: false
	// no new storage after the first step: true
}
