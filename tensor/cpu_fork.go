package tensor

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// The fork-join of the parallel CPU kernels (gemmParallel, runChunks): helper goroutines
// kept warm between consecutive kernels, and pullItems, which hands them work.
//
// A kernel forks by handing a function to helpers and running its own share on the
// caller. A new goroutine starts on an idle P, and waking an idle P (its OS thread parked
// in the kernel) took 20-50 µs in a 2-CPU VM, as long as a small kernel; a training step
// forks a few thousand times. So a helper that has finished its function spins for
// helperSpin, waiting for the next one, before it exits: the next fork hands it over
// through memory, with no wake-up.

// helperSpin is how long a helper waits, spinning, for its next function before it
// exits, and a fork's caller for its helpers' last items before it parks. It bounds the
// CPU time spinning takes from other goroutines and processes after the last fork of a
// burst. On a 2-CPU VM with 50 µs, W1 and W2 steps (alternated with the build without
// spinning, load ~1.5) took 682-732 against 724-766 ms and 274-275 against 279-281 ms;
// a burst of 10 row ops of 32K floats took 163 against 321 µs on an idle machine, but
// 30-90% longer on one loaded 3-4 times over (other processes then want the CPU a
// helper spins on). The tensor tests ran as fast.
const helperSpin = 50 * time.Microsecond

// helperState is a spinning helper's state: spinning, then taken (a function is on its
// way) or gone (it timed out and exits).
const (
	helperSpinning int32 = iota
	helperTaken
	helperGone
)

// helper is a goroutine that runs the functions handed to it.
type helper struct {
	state atomic.Int32
	fn    atomic.Pointer[func() bool] // the function handed over, nil while there is none
}

// helperPool lists the helpers spinning for a function, most recent last (and some that
// have given up, which take skips).
type helperPool struct {
	mu       sync.Mutex
	idle     []*helper
	spinning atomic.Int32 // helpers spinning now
}

// helpers is the process's helper pool: like sync.Pool, a cache of resources (idle
// goroutines) that kernels share; no kernel's result depends on it.
var helpers helperPool

// goHelper runs *fn on a helper goroutine: a spinning one if any, else a new one; *fn
// reports whether the helper should then spin for another function. fn must stay valid
// until *fn has returned (a field of the fork it runs, so that handing it over
// allocates nothing). goHelper reports whether it started a new goroutine (which waits in
// the caller's P's runnext slot until the caller blocks or another goroutine is started;
// see fork.run).
func goHelper(fn *func() bool) (started bool) {
	if h := helpers.take(); h != nil {
		h.fn.Store(fn)
		return false
	}
	go (&helper{}).run(*fn)
	return true
}

// take removes and returns a spinning helper, marked taken, or nil when none spins.
func (p *helperPool) take() *helper {
	if p.spinning.Load() == 0 {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for n := len(p.idle); n > 0; n = len(p.idle) {
		h := p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		if h.state.CompareAndSwap(helperSpinning, helperTaken) {
			p.spinning.Add(-1)
			return h
		}
	}
	return nil
}

// spin lists h as spinning and reports true, or false when as many helpers as there are
// other CPUs spin already (more would only take CPU time from the goroutines working).
func (p *helperPool) spin(h *helper) bool {
	if helperSpin <= 0 || int(p.spinning.Add(1)) > min(runtime.NumCPU(), runtime.GOMAXPROCS(0))-1 {
		p.spinning.Add(-1)
		return false
	}
	h.fn.Store(nil)
	h.state.Store(helperSpinning)
	p.mu.Lock()
	p.idle = append(p.idle, h)
	p.mu.Unlock()
	return true
}

// run runs fn, then each function handed to h, until one asks it not to spin or none
// comes within helperSpin.
func (h *helper) run(fn func() bool) {
	for fn != nil && fn() {
		fn = h.next()
	}
}

// next returns the next function handed to h, or nil when none came within helperSpin
// (h is then gone, and take skips it) or h may not spin (helperPool.spin).
func (h *helper) next() func() bool {
	if !helpers.spin(h) {
		return nil
	}
	for !spinUntil(func() bool { return h.fn.Load() != nil }) {
		if h.state.CompareAndSwap(helperSpinning, helperGone) {
			helpers.spinning.Add(-1)
			return nil
		}
		// Taken: the function is on its way.
	}
	return *h.fn.Load()
}

// spinUntil reports whether cond became true within helperSpin, polling it.
func spinUntil(cond func() bool) bool {
	if helperSpin <= 0 {
		return cond()
	}
	deadline := time.Now().Add(helperSpin)
	for i := 1; ; i++ {
		if cond() {
			return true
		}
		if i%256 == 0 && time.Now().After(deadline) {
			return false
		}
	}
}
