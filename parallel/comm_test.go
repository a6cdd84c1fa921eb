package parallel

import (
	"testing"

	"megago/parallel/internal/transport"
)

// TestOpMatchesTransport pins what the transports rely on when they convert an Op with
// transport.Op(op): the two types number the reductions alike.
func TestOpMatchesTransport(t *testing.T) {
	want := map[Op]transport.Op{Sum: transport.Sum, Max: transport.Max, Min: transport.Min, Avg: transport.Avg}
	for op, w := range want {
		if transport.Op(op) != w {
			t.Errorf("transport.Op(%v) = %d, want %d", op, transport.Op(op), w)
		}
	}
}
