package main

import (
	"context"
	"fmt"
	"io"
)

// T5 runs with tensor and data parallelism: a pipeline layout is refused with one
// message, before any work starts.
func Example() {
	args := []string{"--ranks", "4", "--pipeline-model-parallel-size", "2"}
	_, err := run(context.Background(), args, func(string) string { return "" }, io.Discard, io.Discard)
	fmt.Println(err)
	// Output:
	// --pipeline-model-parallel-size 2: T5 runs with tensor and data parallelism only (megago does not split its encoder and decoder into pipeline stages); use --tensor-model-parallel-size and more ranks for DP
}
