package tensor

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// fork is the state of one pullItems or runChunks call, shared by the goroutines that
// run its items. Forks are recycled (forks): a decode step forks ~200 times, and the
// counters, wait group and closures of each, allocated afresh, were ~10 heap objects a
// fork, most on pages fresh since the last GC.
type fork struct {
	n int // items [0, n)
	// Each goroutine's item function and done function come from worker(id), or, when
	// body is set (runChunks), item i is body over chunk i of [0, total).
	worker       func(id int) (item func(i int), done func())
	body         func(lo, hi int)
	total, chunk int

	next     atomic.Int64 // the next item to take
	finished atomic.Int64 // items returned
	parked   atomic.Bool  // the caller waits, parked, for the last items
	ids      atomic.Int64 // the last worker id handed out (the caller's is 0)
	refs     atomic.Int32 // goroutines that may still read the fork: the caller and helpers handed it
	wg       sync.WaitGroup
	mu       sync.Mutex
	panicked any  // the first panic of an item, under mu
	failed   bool // whether an item panicked, under mu

	help func() bool // f.helper, bound once (newFork): what goHelper hands over
}

// forks recycles fork values between calls, like gemmWorkers; no result depends on it.
var forks = sync.Pool{New: func() any { return new(fork) }}

// newFork returns a fork of n items, its counters zero.
func newFork(n int) *fork {
	f := forks.Get().(*fork)
	if f.help == nil {
		f.help = f.helper
	}
	f.n = n
	f.next.Store(0)
	f.finished.Store(0)
	f.parked.Store(false)
	f.ids.Store(0)
	return f
}

// unref drops one goroutine's reference to f; the last one recycles it.
func (f *fork) unref() {
	if f.refs.Add(-1) == 0 {
		f.worker, f.body, f.panicked, f.failed = nil, nil, nil, false
		forks.Put(f)
	}
}

// pullItems runs items [0, n) on up to workers goroutines: the calling one (id 0) and
// helpers (goHelper). Each gets its item function, and a function to call when it has no
// more items (or nil), from worker(id), and pulls the next item from a shared counter, so
// one slowed by other load takes fewer. It returns once every item has returned,
// re-panicking on the caller a panic of any; a helper that starts after all items are
// taken runs none and is not waited for. The caller starts at once and helpers join when
// they can: a fork that waited for them ran attention's batched products ~10% slower, and
// row ops of 32K floats (runChunks before it ran here) 2-4 times slower on a loaded
// machine.
func pullItems(n, workers int, worker func(id int) (item func(i int), done func())) {
	f := newFork(n)
	f.worker = worker
	f.run(workers)
}

// runChunks runs body over [0, n) in chunks of chunk contiguous items on up to workers
// goroutines, the caller included, each taking the next chunk from a shared counter (a
// goroutine slowed down by other load takes fewer; see pullItems). A panic in body is
// re-raised on the caller's goroutine, where it can be recovered.
func runChunks(n, chunk, workers int, body func(lo, hi int)) {
	f := newFork((n + chunk - 1) / chunk)
	f.body, f.total, f.chunk = body, n, chunk
	f.run(workers)
}

// run runs f's items on up to workers goroutines, the caller's first (see pullItems).
func (f *fork) run(workers int) {
	n := f.n
	workers = min(workers, n, runtime.GOMAXPROCS(0))
	f.refs.Store(int32(max(workers, 1)))
	f.wg.Add(n)
	started := false
	for range workers - 1 {
		started = goHelper(&f.help) || started
	}
	if started {
		// A goroutine just started waits in its P's runnext slot, which an idle P does
		// not take at once; starting another moves it to the stealable queue (without,
		// attention's 64×64 products ran 25% slower).
		go func() {}()
	}
	f.loop(0)
	// Spinning while helpers finish their last items keeps this P busy: a parked caller
	// is readied on the P of the helper that finishes last, which then does not spin.
	if workers > 1 && !spinUntil(func() bool { return f.finished.Load() == int64(n) }) {
		f.parked.Store(true)
	}
	f.wg.Wait()
	f.mu.Lock()
	failed, r := f.failed, f.panicked
	f.mu.Unlock()
	f.unref()
	if failed {
		panic(r)
	}
}

// helper is what a helper goroutine handed f runs: its share of the items, then whether
// it may spin for the next function.
func (f *fork) helper() bool {
	f.loop(int(f.ids.Add(1)))
	// Spinning would hold the P on which the caller, parked, was readied.
	spin := !f.parked.Load()
	f.unref()
	return spin
}

// loop runs the items one goroutine pulls, as worker id.
func (f *fork) loop(id int) {
	var item func(int)
	var done func()
	if f.body == nil {
		item, done = f.worker(id)
	}
	for i := int(f.next.Add(1) - 1); i < f.n; i = int(f.next.Add(1) - 1) {
		f.runItem(item, i)
	}
	if done != nil {
		done()
	}
}

// runItem runs item i (with item, or f.body's chunk i when item is nil), recording a
// panic for the caller.
func (f *fork) runItem(item func(int), i int) {
	defer func() {
		if r := recover(); r != nil {
			f.mu.Lock()
			if !f.failed {
				f.failed, f.panicked = true, r
			}
			f.mu.Unlock()
		}
		f.wg.Done()
		f.finished.Add(1)
	}()
	if item == nil {
		f.body(i*f.chunk, min(f.total, (i+1)*f.chunk))
		return
	}
	item(i)
}
