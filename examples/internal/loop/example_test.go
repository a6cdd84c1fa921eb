package loop_test

import (
	"context"
	"fmt"

	"megago/examples/internal/loop"
	"megago/examples/internal/report"
	"megago/nn"
	"megago/parallel"
	"megago/tensor"
	"megago/train"
)

// A run resumed after iteration 1 of 4, validating every 2 iterations (and after the
// last) and saving a checkpoint at the end: what the loop asks of the example, and when.
func Example() {
	m, err := build(4) // a one-layer GPT on one rank; its settings: 4 iterations, eval every 2
	if err != nil {
		fmt.Println(err)
		return
	}
	l := loop.Loop{Settings: m.cfg, Mesh: m.mesh, Dev: m.dev, Trainer: m.trainer,
		Dropout: tensor.NewRNG(1).Named("dropout"),
		Forward: func(it int, pass func(micro int) *nn.Pass) (parallel.ForwardFunc, error) {
			fmt.Println("step: iteration", it+1)
			return train.GPTForward(m.chunks, pass, m.batch(it)), nil
		},
		Eval: func(it int) error {
			fmt.Println("validate after iteration", it)
			return nil
		},
		Save: func(_ context.Context, it int, last bool, _ *report.Report) error {
			if last {
				fmt.Println("save iteration", it)
			}
			return nil
		},
	}
	res, err := l.Run(context.Background(), 1)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%d iterations done, %d losses in this run\n", res.Iterations, len(res.Losses))
	// Output:
	// step: iteration 2
	// validate after iteration 2
	// step: iteration 3
	// step: iteration 4
	// save iteration 4
	// validate after iteration 4
	// 4 iterations done, 3 losses in this run
}
