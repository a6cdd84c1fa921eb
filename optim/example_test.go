package optim_test

import (
	"context"
	"fmt"

	"megago/nn"
	"megago/optim"
	"megago/tensor"
)

// Fit a 3-element parameter to a target with AdamW, warmup and cosine decay, and clipping.
func Example() {
	dev := tensor.NewCPU()
	w := &nn.Param{Tensor: tensor.Zeros(dev, tensor.F32, 3).SetRequiresGrad(true), Name: "w",
		GlobalShape: tensor.Shape{3}, PartitionDim: -1, TPReplicated: true}
	target := tensor.FromSlice(dev, []float32{1, -2, 0.5})

	sched, err := optim.NewSchedule(optim.ScheduleConfig{MaxLR: 0.1, MinLR: 0.01, WarmupSteps: 10,
		DecaySteps: 150, Decay: optim.DecayCosine})
	if err != nil {
		panic(err)
	}
	opt, err := optim.New([]*nn.Param{w}, optim.Config{Schedule: sched, ClipGrad: 1})
	if err != nil {
		panic(err)
	}
	buf := opt.Buffers()[0]
	fmt.Printf("buffer: %v, %d elements (3 padded to a bucket of 128)\n", buf.DType, buf.Size())

	for step := range 150 {
		s := dev.NewScope()
		opt.ZeroGrad()
		d := tensor.Sub(w.Tensor, target)
		loss := tensor.Sum(tensor.Mul(d, d))
		loss.Backward()
		res, err := opt.Step(context.Background())
		if err != nil {
			panic(err)
		}
		if step%50 == 0 {
			fmt.Printf("step %3d: loss %6.3f, grad norm %5.2f, lr %.3f\n", step, loss.Item(), res.GradNorm, res.LR)
		}
		s.Close()
	}
	fmt.Printf("w = %.2f\n", tensor.ToSlice[float32](w.Tensor))
	// Output:
	// buffer: float32, 128 elements (3 padded to a bucket of 128)
	// step   0: loss  5.250, grad norm  4.58, lr 0.000
	// step  50: loss  0.008, grad norm  0.18, lr 0.083
	// step 100: loss  0.000, grad norm  0.02, lr 0.035
	// w = [1.00 -2.00 0.50]
}
