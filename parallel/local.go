package parallel

import (
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"megago/parallel/internal/transport"
)

// The in-process transport: ranks are goroutines, a group's calls meet in shared memory.
// local.go runs the job and holds the groups; local_world.go detects failed and
// deadlocked jobs; local_collectives.go and local_p2p.go are the calls.

// RunLocal runs fn on n goroutine ranks connected by the in-process transport and waits
// for all of them. Each rank gets its own world Comm. Reductions combine contributions in
// rank order, so results are bitwise reproducible from run to run.
//
// A rank that returns an error or panics aborts the job: ranks blocked in (or later
// entering) a communication call get an *Error saying which rank failed, instead of
// hanging. So do ranks left waiting for a rank that has returned, or ranks that all wait
// on one another (a deadlock). Mismatched collectives (different ops, dtypes, sizes or
// roots at the same point of the sequence) fail on every rank involved. RunLocal returns
// the ranks' errors joined, each prefixed with its rank, or nil.
func RunLocal(n int, fn func(c Comm) error) error { return RunLocalWith(n, LocalOptions{}, fn) }

// LocalOptions tunes the in-process transport.
type LocalOptions struct {
	// StallTimeout is how long every running rank must stay blocked, with no call
	// completing anywhere, before the job is declared deadlocked and aborted; 0 means 10 s.
	// Waiting on a rank that has returned is detected at once, whatever this is.
	StallTimeout time.Duration
}

// RunLocalWith is RunLocal with options.
func RunLocalWith(n int, o LocalOptions, fn func(c Comm) error) error {
	if n < 1 {
		return fmt.Errorf("parallel: RunLocal: %d ranks", n)
	}
	if o.StallTimeout <= 0 {
		o.StallTimeout = 10 * time.Second
	}
	w := newLocalWorld(n, o.StallTimeout)
	world := w.newGroup("world", seq(n))
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = runRank(r, world, fn)
			if errs[r] != nil {
				w.abort(fmt.Errorf("rank %d failed: %w", r, errs[r]))
			}
			w.exit(r)
		}()
	}
	wg.Wait()
	w.stopWatchdog()
	var out []error
	for r, err := range errs {
		if err != nil {
			out = append(out, fmt.Errorf("rank %d: %w", r, err))
		}
	}
	return errors.Join(out...)
}

func runRank(r int, world *localGroup, fn func(c Comm) error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v\n%s", p, debug.Stack())
		}
	}()
	return fn(&localComm{g: world, rank: r})
}

func seq(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

// Self returns a group holding only the calling rank: every collective on it is the
// identity. Layers built for a single device use it as their TP group.
func Self() Comm {
	w := newLocalWorld(1, time.Hour)
	return &localComm{g: w.newGroup("self", []int{0})}
}

// localGroup is one group of ranks of a world.
type localGroup struct {
	w     *localWorld
	name  string
	ranks []int // world rank of each group rank

	pending map[uint64]*rendezvous // collectives in progress, by sequence number
	mail    map[[2]int][]message   // (from, to) → messages not yet received
	recvs   map[[2]int]*recvWait
}

func (w *localWorld) newGroup(name string, ranks []int) *localGroup {
	return &localGroup{w: w, name: name, ranks: ranks,
		pending: map[uint64]*rendezvous{}, mail: map[[2]int][]message{}, recvs: map[[2]int]*recvWait{}}
}

// localComm is one rank's handle on a group.
type localComm struct {
	g    *localGroup
	rank int
	seq  uint64 // collectives started on the group by this rank
}

func (c *localComm) Rank() int           { return c.rank }
func (c *localComm) Size() int           { return len(c.g.ranks) }
func (c *localComm) Name() string        { return c.g.name }
func (c *localComm) WorldRank(r int) int { return c.g.ranks[r] }

func (c *localComm) fail(k transport.Kind, peer int, err error) error {
	return &Error{Op: k.String(), Group: c.g.name, Rank: c.rank, Size: c.Size(), Peer: peer, Err: err}
}

func (c *localComm) aborted(k transport.Kind) error {
	return c.fail(k, -1, fmt.Errorf("aborted: %w", c.g.w.cause))
}
