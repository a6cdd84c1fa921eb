package parallel

import (
	"fmt"
	"sync"
	"time"
)

// EventKind is what a trace event records.
type EventKind uint8

// Trace event kinds.
const (
	EventForward     EventKind = iota + 1 // a forward step
	EventBackward                         // a backward step
	EventP2P                              // a p2p transfer (Send and Recv say which)
	EventReduce                           // a data-parallel gradient bucket reduction (Micro: the bucket)
	EventSync                             // other gradient synchronization (tied embeddings, sequence-parallel norms)
	EventGather                           // a distributed optimizer's parameter all-gather of one bucket (Micro: the bucket)
	EventCPRing                           // a context-parallel ring transfer of key/value blocks (Micro: the ring step)
	EventCPAttention                      // one ring step's attention blocks (Micro: the ring step)
	// EventCPRingBackward is a context-parallel ring transfer in backward, of key/value
	// blocks or of their accumulated gradients (Micro: the ring step).
	EventCPRingBackward
	EventCPAttentionBackward // one ring step's attention gradients (Micro: the ring step)
)

func (k EventKind) String() string {
	switch k {
	case EventForward:
		return "forward"
	case EventBackward:
		return "backward"
	case EventP2P:
		return "p2p"
	case EventReduce:
		return "reduce"
	case EventSync:
		return "sync"
	case EventGather:
		return "gather"
	case EventCPRing:
		return "cp-ring"
	case EventCPAttention:
		return "cp-attention"
	case EventCPRingBackward:
		return "cp-ring-backward"
	case EventCPAttentionBackward:
		return "cp-attention-backward"
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// Event is one traced interval on one rank.
type Event struct {
	Start, End time.Duration // since the trace's epoch
	Kind       EventKind
	Micro      int   // micro-batch (bucket for EventReduce and EventGather, ring step for EventCP*; -1 when none)
	Chunk      int   // model chunk
	Send, Recv Phase // EventP2P: the directions sent and received (0: none)
}

// String writes the event as "12.3ms-14.0ms forward mb 3 chunk 1" (or "... reduce
// bucket 2").
func (e Event) String() string {
	s := fmt.Sprintf("%v-%v %v", e.Start.Round(time.Microsecond), e.End.Round(time.Microsecond), e.Kind)
	if e.Kind == EventP2P {
		s += " " + p2pName(e.Send, e.Recv)
	}
	switch {
	case e.Micro >= 0 && (e.Kind == EventReduce || e.Kind == EventGather):
		s += fmt.Sprintf(" bucket %d", e.Micro)
	case e.Micro >= 0 && e.Kind >= EventCPRing && e.Kind <= EventCPAttentionBackward:
		s += fmt.Sprintf(" step %d", e.Micro)
	case e.Micro >= 0:
		s += fmt.Sprintf(" mb %d chunk %d", e.Micro, e.Chunk)
	}
	return s
}

// p2pName names a transfer as Megatron's p2p functions do ("send-forward-recv-backward").
func p2pName(send, recv Phase) string {
	dir := func(k Phase) string {
		if k == Forward {
			return "forward"
		}
		return "backward"
	}
	switch {
	case send != 0 && recv != 0:
		return "send-" + dir(send) + "-recv-" + dir(recv)
	case send != 0:
		return "send-" + dir(send)
	case recv != 0:
		return "recv-" + dir(recv)
	}
	return "none"
}

func exchangeEvent(tr Transfer) Event {
	e := Event{Kind: EventP2P, Recv: tr.RecvDir}
	if tr.Send != nil {
		e.Send = tr.SendDir
	}
	return e
}

// Trace records one rank's schedule as timed events: its forward and backward steps, the
// p2p transfers it waits in, gradient reductions and parameter all-gathers. Pass the same epoch to the traces of
// ranks that share a clock (goroutine ranks of one process) so their timelines line up.
// A nil *Trace records nothing. Safe for concurrent use (a data-parallel reducer records
// from its own goroutine).
type Trace struct {
	Rank  int // the rank the timeline labels the trace with (e.g. its pipeline stage)
	epoch time.Time

	mu     sync.Mutex
	events []Event
}

// NewTrace returns an empty trace for rank whose times count from epoch.
func NewTrace(rank int, epoch time.Time) *Trace { return &Trace{Rank: rank, epoch: epoch} }

// Events returns a copy of the recorded events, in the order they ended.
func (t *Trace) Events() []Event {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]Event(nil), t.events...)
}

// Reset drops the recorded events and restarts the clock at epoch.
func (t *Trace) Reset(epoch time.Time) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.events, t.epoch = nil, epoch
}

// Record adds an event that started at start and ends now. kind, micro and chunk describe
// it (see Event); use it for intervals the schedule does not see itself.
func (t *Trace) Record(start time.Time, kind EventKind, micro, chunk int) {
	if t == nil {
		return
	}
	t.end(start, Event{Kind: kind}, micro, chunk)
}

// begin returns the start time of an event (the zero time on a nil trace).
func (t *Trace) begin() time.Time {
	if t == nil {
		return time.Time{}
	}
	return time.Now()
}

// end records e, which started at start, with its micro-batch and chunk.
func (t *Trace) end(start time.Time, e Event, micro, chunk int) {
	if t == nil {
		return
	}
	now := time.Now()
	e.Micro, e.Chunk = micro, chunk
	t.mu.Lock()
	defer t.mu.Unlock()
	e.Start, e.End = start.Sub(t.epoch), now.Sub(t.epoch)
	t.events = append(t.events, e)
}

// Add appends an event with its times already set (a simulated or merged timeline).
func (t *Trace) Add(e Event) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.events = append(t.events, e)
}
