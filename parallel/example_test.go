package parallel_test

import (
	"context"
	"fmt"
	"sync"

	"megago/parallel"
	"megago/tensor"
)

// Four goroutine ranks all-reduce a tensor holding their rank.
func ExampleRunLocal() {
	ctx := context.Background()
	var mu sync.Mutex
	sums := make([]float32, 4)
	err := parallel.RunLocal(4, func(c parallel.Comm) error {
		dev := tensor.NewCPU() // each rank has its own device
		x := tensor.Full(dev, tensor.F32, float64(c.Rank()), 2)
		if err := c.AllReduce(ctx, x, parallel.Sum); err != nil {
			return err
		}
		mu.Lock()
		sums[c.Rank()] = tensor.ToSlice[float32](x)[0]
		mu.Unlock()
		return nil
	})
	fmt.Println(sums, err)
	// Output: [6 6 6 6] <nil>
}
