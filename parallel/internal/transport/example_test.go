package transport_test

import (
	"fmt"

	"megago/parallel/internal/transport"
)

// Calls are a typed kind, named in errors and traces, not strings compared at run time.
func ExampleKind() {
	for _, k := range []transport.Kind{transport.AllReduce, transport.Send} {
		fmt.Println(k, k.Collective())
	}
	// Output:
	// all-reduce true
	// send false
}
