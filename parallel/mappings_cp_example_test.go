package parallel_test

import (
	"context"
	"fmt"
	"sync"

	"megago/parallel"
	"megago/tensor"
)

// Two context-parallel ranks hold a sequence of 4 positions in Megatron's load-balanced
// chunks (rank 0 positions 0 and 3, rank 1 positions 1 and 2) for 2 heads; the element
// of head h at position s is 10·h + s. The all-to-all gives each rank one head at every
// position, in sequence order.
func ExampleAllToAllCPSeqToHeads() {
	ctx := context.Background()
	held := [][]float64{{0, 3}, {1, 2}} // positions of each rank
	var mu sync.Mutex
	got := make([][]float64, 2)
	err := parallel.RunLocal(2, func(c parallel.Comm) error {
		pos := held[c.Rank()]
		x := tensor.FromSlice(tensor.NewCPU(), []float64{pos[0], pos[1], 10 + pos[0], 10 + pos[1]}, 1, 2, 2, 1) // [B, H, S/cp, HS]
		y := parallel.AllToAllCPSeqToHeads(ctx, c, x)                                                           // [B, H/cp, S, HS]
		mu.Lock()
		got[c.Rank()] = tensor.ToSlice[float64](y)
		mu.Unlock()
		return nil
	})
	fmt.Println(got, err)
	// Output: [[0 1 2 3] [10 11 12 13]] <nil>
}
