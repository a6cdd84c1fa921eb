package ranks_test

import (
	"context"
	"fmt"
	"io"
	"os"

	"megago/examples/internal/ranks"
	"megago/parallel"
	"megago/tensor"
)

// Without a launcher's environment, Run starts goroutine ranks, each on a device of its
// own; only rank 0 gets the real output.
func Example() {
	tcp, _ := ranks.FromEnv(func(string) string { return "" })
	devs, err := ranks.OpenDevices("cpu", false, tcp, 3) // one device per rank
	if err != nil {
		fmt.Println(err)
		return
	}
	defer devs.Close()
	err = ranks.Run(context.Background(), tcp, devs, os.Stdout, func(world parallel.Comm, dev *tensor.Device, out io.Writer) error {
		fmt.Fprintf(out, "rank %d of %d reports, on %s\n", world.Rank(), world.Size(), dev)
		return nil
	})
	fmt.Println(tcp == nil, ranks.Builder(tcp), err)
	// Output:
	// rank 0 of 3 reports, on cpu
	// true true <nil>
}
