package ranks_test

import (
	"context"
	"fmt"
	"io"
	"os"

	"megago/examples/internal/ranks"
	"megago/parallel"
)

// Without a launcher's environment, Run starts goroutine ranks; only rank 0 gets the
// real output.
func Example() {
	tcp, _ := ranks.FromEnv(func(string) string { return "" })
	err := ranks.Run(context.Background(), tcp, 3, os.Stdout, func(world parallel.Comm, out io.Writer) error {
		fmt.Fprintf(out, "rank %d of %d reports\n", world.Rank(), world.Size())
		return nil
	})
	fmt.Println(tcp == nil, ranks.Builder(tcp), err)
	// Output:
	// rank 0 of 3 reports
	// true true <nil>
}
