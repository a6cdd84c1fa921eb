package tensor_test

import (
	"fmt"

	"megago/tensor"
)

// cube is y = x³ as a custom differentiable function. Forward runs with recording off
// and keeps what Backward needs in the function's own fields; Backward gets dL/dy and
// returns dL/dx = dL/dy · 3x².
type cube struct{ x *tensor.Tensor }

func (c *cube) Forward(in []*tensor.Tensor) []*tensor.Tensor {
	c.x = in[0]
	return []*tensor.Tensor{tensor.Mul(tensor.Mul(in[0], in[0]), in[0])}
}

func (c *cube) Backward(dy []*tensor.Tensor) []*tensor.Tensor {
	return []*tensor.Tensor{tensor.Mul(dy[0], tensor.Scale(tensor.Mul(c.x, c.x), 3))}
}

// A Function (the interface of parallel's communication mappings and of fused kernels)
// enters the graph through Apply. For L = Σ xᵢ³ at x = [1 2 3]: L = 1+8+27 = 36 and
// dL/dx = 3x² = [3 12 27].
func ExampleFunction() {
	dev := tensor.NewCPU()
	x := tensor.FromSlice(dev, []float64{1, 2, 3}, 3).SetRequiresGrad(true)
	y := tensor.Apply("cube", &cube{}, x)[0]
	loss := tensor.Sum(y)
	loss.Backward()
	fmt.Println(loss.Item(), tensor.ToSlice[float64](x.Grad()))
	// Output:
	// 36 [3 12 27]
}

// Checkpoint (activation recomputation) keeps only a segment's outputs and runs the
// segment again during backward; the gradients are those of calling it directly, and a
// parameter used inside it gets its gradient as usual. For L = Σ (wᵢxᵢ)²:
// dL/dx = 2w²x = 2·[4 9 16]·[0.5 -1 2] = [4 -18 64] and dL/dw = 2wx² = 2·[2 3 4]·[0.25 1 4]
// = [1 6 32].
func ExampleCheckpoint() {
	dev := tensor.NewCPU()
	x := tensor.FromSlice(dev, []float64{0.5, -1, 2}, 3).SetRequiresGrad(true)
	w := tensor.FromSlice(dev, []float64{2, 3, 4}, 3).SetRequiresGrad(true) // a parameter
	segment := func(in []*tensor.Tensor) []*tensor.Tensor {
		h := tensor.Mul(w, in[0]) // not kept: recomputed during backward
		return []*tensor.Tensor{tensor.Mul(h, h)}
	}
	out := tensor.Checkpoint(segment, x)[0]
	tensor.Sum(out).Backward()
	fmt.Println("dL/dx:", tensor.ToSlice[float64](x.Grad()))
	fmt.Println("dL/dw:", tensor.ToSlice[float64](w.Grad()))
	// Output:
	// dL/dx: [4 -18 64]
	// dL/dw: [1 6 32]
}
