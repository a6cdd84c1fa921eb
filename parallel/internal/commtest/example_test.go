package commtest_test

import (
	"context"
	"fmt"

	"megago/parallel"
	"megago/parallel/internal/commtest"
	"megago/tensor"
)

// A transport proves itself by passing the collective suite on every rank: here the
// in-process transport with two goroutine ranks.
func ExampleSuite() {
	err := parallel.RunLocal(2, func(c parallel.Comm) error {
		return commtest.Suite(context.Background(), c, tensor.NewCPU())
	})
	fmt.Println("suite:", err)
	// Output: suite: <nil>
}
