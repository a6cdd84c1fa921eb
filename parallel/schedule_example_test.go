package parallel_test

import (
	"context"
	"fmt"
	"sync"

	"megago/parallel"
	"megago/tensor"
)

// Two goroutine stages train a two-weight model under 1F1B. The schedule knows nothing
// about the model: the forward-step function does, receiving the previous stage's
// activation (a leaf requiring grad) on stage 1 and returning the loss there.
func ExamplePipeline_Train() {
	var mu sync.Mutex
	err := parallel.RunLocal(2, func(pp parallel.Comm) error {
		ctx := context.Background()
		dev := tensor.NewCPU()
		pl, err := parallel.NewPipeline(ctx, pp, dev, parallel.P2PShape{})
		if err != nil {
			return err
		}
		w := tensor.Full(dev, tensor.F64, float64(pp.Rank()+2), 1, 1).SetRequiresGrad(true) // stage r's weight
		fwd := func(s parallel.Step) (*tensor.Tensor, error) {
			x := s.Input
			if x == nil { // stage 0 reads micro-batch s.Micro: the value s.Micro+1
				x = tensor.Full(dev, tensor.F64, float64(s.Micro+1), 1, 1)
			}
			y := tensor.MatMul(x, w)
			if s.Last {
				return tensor.Sum(y), nil // the loss: 6·(m+1)
			}
			return y, nil
		}
		losses, err := pl.Train(ctx, parallel.OneFOneB{M: 3}, fwd, parallel.Hooks{})
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		if losses != nil {
			fmt.Println("losses:", losses)
		}
		// d mean(loss)/dw: stage 0: 3·mean(m+1) = 6; stage 1: 2·mean(m+1) = 4.
		fmt.Printf("stage %d: plan %s, grad %v\n", pp.Rank(),
			parallel.FormatPlan(must(parallel.OneFOneB{M: 3}.Plan(2, pp.Rank()))), w.Grad().Item())
		return nil
	})
	if err != nil {
		fmt.Println(err)
	}
	// Unordered output:
	// losses: [6 12 18]
	// stage 0: plan F0 F1 B0 F2 B1 B2, grad 6
	// stage 1: plan F0 B0 F1 B1 F2 B2, grad 4
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
