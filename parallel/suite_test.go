package parallel_test

import (
	"context"
	"fmt"
	"testing"

	"megago/parallel"
	"megago/parallel/internal/commtest"
	"megago/tensor"
)

// suiteRanks are the group sizes the collective suite runs at in one process.
var suiteRanks = []int{1, 2, 3, 4, 8}

func TestCollectiveSuiteLocal(t *testing.T) {
	for _, n := range suiteRanks {
		t.Run(fmt.Sprintf("%d-ranks", n), func(t *testing.T) {
			err := parallel.RunLocal(n, func(c parallel.Comm) error {
				return commtest.Suite(context.Background(), c, tensor.NewCPU())
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}
