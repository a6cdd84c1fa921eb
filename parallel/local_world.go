package parallel

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// localWorld is the state shared by all ranks of one RunLocal job. One mutex guards it and
// every group's bookkeeping; data is copied and reduced outside it.
//
// It also watches for a job that cannot finish: a blocked call waiting on a rank that has
// returned aborts the job at once, and every running rank blocked with nothing changing
// for the stall timeout aborts it as deadlocked.
type localWorld struct {
	n       int
	mu      sync.Mutex
	abortCh chan struct{}
	cause   error // why the job was aborted

	running  int                  // ranks whose fn has not returned
	exited   map[int]bool         // world ranks that have returned
	waiters  map[*waiter]struct{} // blocked calls
	progress uint64               // bumped whenever a call blocks or is released
	watchdog *time.Timer
	stall    time.Duration
}

func newLocalWorld(n int, stall time.Duration) *localWorld {
	return &localWorld{n: n, running: n, stall: stall, abortCh: make(chan struct{}), exited: map[int]bool{}, waiters: map[*waiter]struct{}{}}
}

// waiter is one blocked call: world rank r waits in what for the world ranks needs()
// still has to hear from.
type waiter struct {
	rank  int
	what  string
	needs func() []int
}

func (w *localWorld) abort(cause error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.abortLocked(cause)
}

func (w *localWorld) abortLocked(cause error) {
	if w.cause == nil {
		w.cause = cause
		close(w.abortCh)
	}
}

func (w *localWorld) exit(r int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.running--
	w.exited[r] = true
	w.progress++
	for wt := range w.waiters {
		w.checkWaiterLocked(wt)
	}
	w.checkStallLocked()
}

// stopWatchdog stops the deadlock timer once every rank has returned.
func (w *localWorld) stopWatchdog() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.watchdog != nil {
		w.watchdog.Stop()
	}
}

// blockLocked records a blocked call and checks at once whether it waits on a rank that
// has returned.
func (w *localWorld) blockLocked(wt *waiter) {
	w.waiters[wt] = struct{}{}
	w.progress++
	w.checkWaiterLocked(wt)
	w.checkStallLocked()
}

func (w *localWorld) unblockLocked(wt *waiter) {
	if _, ok := w.waiters[wt]; ok {
		delete(w.waiters, wt)
		w.progress++
	}
}

func (w *localWorld) checkWaiterLocked(wt *waiter) {
	for _, p := range wt.needs() {
		if w.exited[p] {
			w.abortLocked(fmt.Errorf("rank %d waits in %s for rank %d, which has returned", wt.rank, wt.what, p))
			return
		}
	}
}

// checkStallLocked arms the watchdog when every running rank is blocked: if nothing
// changes for the stall timeout, the job is deadlocked.
func (w *localWorld) checkStallLocked() {
	if w.cause != nil || w.running == 0 || w.watchdog != nil {
		return
	}
	blocked := map[int]bool{}
	for wt := range w.waiters {
		blocked[wt.rank] = true
	}
	if len(blocked) < w.running {
		return
	}
	at := w.progress
	w.watchdog = time.AfterFunc(w.stall, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.watchdog = nil
		if w.cause != nil || w.running == 0 {
			return
		}
		if w.progress != at {
			w.checkStallLocked()
			return
		}
		var parts []string
		for wt := range w.waiters {
			parts = append(parts, fmt.Sprintf("rank %d waits in %s", wt.rank, wt.what))
		}
		sort.Strings(parts)
		w.abortLocked(fmt.Errorf("deadlock: every running rank has been blocked for %v: %s", w.stall, strings.Join(parts, "; ")))
	})
}
