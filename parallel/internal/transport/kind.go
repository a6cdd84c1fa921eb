package transport

import "fmt"

// Kind is what a communication call does. The collectives come first: the TCP
// transport carries their values on the wire (frame.go in parallel/tcp), so they must
// not be renumbered.
type Kind uint8

// Kinds of call.
const (
	AllReduce Kind = iota + 1
	AllGather
	ReduceScatter
	Broadcast
	Barrier
	Split
	Send // point to point: not a collective
	Recv
)

var kindNames = [...]string{"", "all-reduce", "all-gather", "reduce-scatter", "broadcast", "barrier", "split", "send", "recv"}

// String returns the name errors give the call: "all-reduce", "send", ...
func (k Kind) String() string {
	if k > 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Collective reports whether every rank of a group takes part in a call of kind k (all
// but Send and Recv).
func (k Kind) Collective() bool { return k >= AllReduce && k <= Split }
