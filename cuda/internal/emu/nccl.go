package emu

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"

	"megago/cuda/internal/nccl"
	"megago/parallel"
)

// NCCL is the emulated collective library, over the memory of the emulator: the calls
// package cuda's Comm makes, with libnccl's arguments plus a context. A communicator's
// ranks (goroutines of this process, on any Devices) meet by unique id in InitRank and
// then exchange data through package parallel's in-process transport (parallel.RunLocal),
// so reductions combine contributions in rank order, as the in-process Comm does. Every
// call completes before it returns: a collective waits for its peers, and Send returns
// once its data is queued for the receiver, so Send never waits for its Recv. The
// stream arguments are ignored.
type NCCL struct {
	d *Device
}

// NCCL returns the emulated NCCL over d's memory.
func (d *Device) NCCL() *NCCL { return &NCCL{d: d} }

// ncclWorld is where the process's communicators meet: the ranks joining each unique id
// and every live communicator by handle. One of the package's two process-wide
// variables (see the package doc).
var ncclWorld = struct {
	mu      sync.Mutex
	joining map[nccl.UniqueID]*joining
	comms   map[nccl.Handle]*rankComm
	next    nccl.Handle
}{joining: map[nccl.UniqueID]*joining{}, comms: map[nccl.Handle]*rankComm{}}

// joining is a communicator being created: its in-process job runs from the first
// InitRank until every rank has destroyed or aborted its handle.
type joining struct {
	n      int
	joined []bool
	ready  chan struct{}   // closed once comms is filled
	comms  []parallel.Comm // each rank's handle on the job's world
	stop   []chan error    // ends rank r's part of the job: nil (destroy) or the abort
	mu     sync.Mutex      // guards comms and left while the job starts
	left   int             // ranks whose Comm has not arrived yet
}

// rankComm is one rank's communicator.
type rankComm struct {
	c    parallel.Comm
	stop chan error
}

// errAborted is why a rank's part of a job ended when ncclCommAbort was called.
var errAborted = errors.New("emulated NCCL: communicator aborted (ncclCommAbort)")

// startJoining starts the in-process job of an n-rank communicator.
func startJoining(n int) *joining {
	j := &joining{n: n, joined: make([]bool, n), ready: make(chan struct{}), comms: make([]parallel.Comm, n),
		stop: make([]chan error, n), left: n}
	for r := range j.stop {
		j.stop[r] = make(chan error, 1)
	}
	go parallel.RunLocal(n, func(c parallel.Comm) error {
		j.mu.Lock()
		j.comms[c.Rank()] = c
		if j.left--; j.left == 0 {
			close(j.ready)
		}
		j.mu.Unlock()
		return <-j.stop[c.Rank()]
	})
	return j
}

// NewUniqueID returns a new random communicator id.
func (e *NCCL) NewUniqueID() (nccl.UniqueID, error) {
	var id nccl.UniqueID
	rand.Read(id.Internal[:])
	return id, nil
}

// InitRank joins rank of nranks to communicator id. It does not wait for the other
// ranks: the first collective does.
func (e *NCCL) InitRank(ctx context.Context, id nccl.UniqueID, nranks, rank int) (nccl.Handle, error) {
	w := &ncclWorld
	w.mu.Lock()
	j := w.joining[id]
	if j == nil {
		if nranks < 1 || rank < 0 || rank >= nranks {
			w.mu.Unlock()
			return 0, fmt.Errorf("emulated ncclCommInitRank: rank %d of %d", rank, nranks)
		}
		j = startJoining(nranks)
		w.joining[id] = j
	}
	if nranks != j.n || rank < 0 || rank >= j.n || j.joined[rank] {
		w.mu.Unlock()
		return 0, fmt.Errorf("emulated ncclCommInitRank: rank %d of %d joins a communicator of %d ranks (joined: %v)", rank, nranks, j.n, j.joined)
	}
	j.joined[rank] = true
	if !j.anyLeft() {
		delete(w.joining, id)
	}
	w.mu.Unlock()
	select {
	case <-j.ready:
	case <-ctx.Done():
		j.stop[rank] <- ctx.Err() // the job fails for the peers too
		return 0, ctx.Err()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.next++
	w.comms[w.next] = &rankComm{c: j.comms[rank], stop: j.stop[rank]}
	return w.next, nil
}

// anyLeft reports whether a rank has not joined yet.
func (j *joining) anyLeft() bool {
	for _, in := range j.joined {
		if !in {
			return true
		}
	}
	return false
}

// comm returns the communicator of handle h.
func comm(h nccl.Handle) (*rankComm, error) {
	ncclWorld.mu.Lock()
	defer ncclWorld.mu.Unlock()
	c := ncclWorld.comms[h]
	if c == nil {
		return nil, fmt.Errorf("emulated NCCL: no communicator %#x (destroyed?)", uintptr(h))
	}
	return c, nil
}

// end ends h's part of its job: peers waiting on it fail, and with an abort every
// rank's pending and later calls do.
func end(h nccl.Handle, cause error) error {
	ncclWorld.mu.Lock()
	c := ncclWorld.comms[h]
	delete(ncclWorld.comms, h)
	ncclWorld.mu.Unlock()
	if c == nil {
		return fmt.Errorf("emulated NCCL: no communicator %#x (destroyed twice?)", uintptr(h))
	}
	c.stop <- cause
	return nil
}

// Destroy frees h. Messages it sent stay receivable.
func (e *NCCL) Destroy(h nccl.Handle) error { return end(h, nil) }

// Abort frees h and fails its peers' pending and later calls.
func (e *NCCL) Abort(h nccl.Handle) error { return end(h, errAborted) }

// AsyncError returns nil: every call reports its own error before it returns.
func (e *NCCL) AsyncError(h nccl.Handle) error { return nil }
