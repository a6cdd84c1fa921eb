package tensor

import (
	"fmt"
	"math/bits"
	"sync"
	"testing"
)

// Device is a backend together with the state that belongs to one user of it: a caching
// pool of storage, a stack of open scopes and the gradient-recording mode. Devices are
// values created by the program and passed down; give each rank (goroutine) its own. The
// pool and scope stack are safe for concurrent use, but scopes opened concurrently on one
// device from several goroutines interleave, so do not share a device across ranks.
type Device struct {
	backend Backend

	mu     sync.Mutex
	free   map[poolKey][]Buffer
	scopes []*Scope
	stats  PoolStats
	noGrad int    // > 0 while inside NoGrad
	allocs uint64 // storages handed out so far; each storage's gen
	poison bool   // poison released storage (in test binaries; see Poisoner)

	fused fusedCounters // forward calls of each fused op (FusedCount)
}

type poolKey struct {
	dt DType
	n  int // the buffer's elements: poolSize of the sizes it serves
}

// poolExact is the largest element count the pool keys exactly; larger requests take
// buffers of poolSize elements.
const poolExact = 1 << 14

// poolSize returns the elements of the buffer the pool hands out for a request of n: n
// up to poolExact, above it n rounded up to the next of eight sizes per doubling (at
// most 1/8 more). A serving step's tensors follow its token count, which changes from
// step to step: keyed by exact size, each new count missed the pool, and its fresh
// storage faulted every page in on first write (~13 us a page; 5% of a 32-client
// serving run). Rounded, steps of nearby counts share buffers. A training step's sizes
// repeat, so they reuse their buffers either way.
func poolSize(n int) int {
	if n <= poolExact {
		return n
	}
	step := 1 << (bits.Len(uint(n-1)) - 4) // n's octave (2^(L-1), 2^L] has eight sizes 2^(L-4) apart
	return (n + step - 1) &^ (step - 1)
}

// PoolStats counts a device's tensor storage, in bytes.
type PoolStats struct {
	InUse       int64 // held by live tensors
	Reserved    int64 // held by live tensors or cached in the pool
	Peak        int64 // largest InUse so far
	Fresh       int64 // total ever obtained from the backend (not from the pool)
	FreshAllocs int64 // number of such allocations
}

// NewDevice returns a device on backend b with an empty pool.
func NewDevice(b Backend) *Device {
	return &Device{backend: b, free: map[poolKey][]Buffer{}, poison: testing.Testing()}
}

// NewCPU returns a new device on the CPU backend.
func NewCPU() *Device { return NewDevice(cpuBackend{}) }

// Backend returns the device's backend.
func (d *Device) Backend() Backend { return d.backend }

// Sync waits until every kernel queued on the device's backend has finished
// (Backend.Sync): timing code calls it before reading the clock. It panics with the
// device's error when one happened.
func (d *Device) Sync() { d.backend.Sync() }

// String returns the backend's name.
func (d *Device) String() string { return d.backend.Name() }

// Stats returns the device's storage statistics.
func (d *Device) Stats() PoolStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stats
}

// EmptyCache returns all cached (unused) storage to the backend.
func (d *Device) EmptyCache() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for k, bufs := range d.free {
		for _, b := range bufs {
			d.backend.Free(b)
			d.stats.Reserved -= int64(k.n * k.dt.Size())
		}
		delete(d.free, k)
	}
}

// alloc returns storage for n elements, from the pool when it has a buffer of n's
// poolSize, and registers it with the innermost open scope unless unscoped.
func (d *Device) alloc(dt DType, n int, unscoped bool) *storage {
	if n < 0 {
		panic(fmt.Sprintf("tensor: negative size %d", n))
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	k := poolKey{dt, poolSize(n)}
	var buf Buffer
	if l := d.free[k]; len(l) > 0 {
		buf = l[len(l)-1]
		d.free[k] = l[:len(l)-1]
	} else {
		d.mu.Unlock()
		buf = d.backend.Alloc(dt, k.n)
		d.mu.Lock()
		d.stats.Fresh += int64(k.n * dt.Size())
		d.stats.FreshAllocs++
		d.stats.Reserved += int64(k.n * dt.Size())
	}
	d.stats.InUse += int64(n * dt.Size())
	d.stats.Peak = max(d.stats.Peak, d.stats.InUse)
	d.allocs++
	st := &storage{dev: d, buf: buf, dt: dt, n: n, gen: d.allocs}
	if !unscoped && len(d.scopes) > 0 {
		s := d.scopes[len(d.scopes)-1]
		st.scope = s
		s.owned = append(s.owned, st)
	}
	return st
}

// adoptLike makes the unscoped storage st owned by the scope that owns like, if any.
func (d *Device) adoptLike(st, like *storage) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if s := like.scope; s != nil {
		st.scope = s
		s.owned = append(s.owned, st)
	}
}

// release returns st's buffer to the pool. Called with d.mu held.
func (d *Device) releaseLocked(st *storage) {
	if st.released {
		return
	}
	st.released = true
	if p, ok := d.backend.(Poisoner); ok && d.poison {
		p.Poison(st.buf, st.dt, poolSize(st.n))
	}
	k := poolKey{st.dt, poolSize(st.n)}
	d.free[k] = append(d.free[k], st.buf)
	d.stats.InUse -= int64(st.n * st.dt.Size())
	st.buf = nil
}

// allocCount returns the number of storages handed out so far: storages allocated after
// a call have a larger gen.
func (d *Device) allocCount() uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.allocs
}

// storage is one allocation; views of it share it.
type storage struct {
	dev      *Device
	buf      Buffer
	dt       DType
	n        int
	scope    *Scope // nil when not owned by a scope
	gen      uint64 // the device's allocation count when st was handed out
	released bool
	gradOver bool // holds a gradient written over a tensor (GradOver): the pass releases it
}

// Scope owns the storage of the tensors created on its device while it is the innermost
// open scope, and returns it to the device's pool when closed. Parameters and optimizer
// state are created outside any scope (or kept past it with Keep) and live until released
// or garbage collected.
type Scope struct {
	dev       *Device
	parent    *Scope
	owned     []*storage
	closed    bool
	suspended bool // taken off the stack by Suspend, its tensors still live
}

// NewScope opens a scope nested inside the innermost open one. Close it, usually with
// defer, in the reverse order of opening.
func (d *Device) NewScope() *Scope {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := &Scope{dev: d}
	if len(d.scopes) > 0 {
		s.parent = d.scopes[len(d.scopes)-1]
	}
	d.scopes = append(d.scopes, s)
	return s
}

// Close releases the storage of every tensor the scope still owns; using those tensors
// afterwards panics. It panics if an inner scope of the same device is still open (a
// suspended scope, being off the stack, can be closed at any time). Closing twice does
// nothing.
func (s *Scope) Close() {
	d := s.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	if s.closed {
		return
	}
	if !s.suspended {
		if len(d.scopes) == 0 || d.scopes[len(d.scopes)-1] != s {
			panic("tensor: Scope.Close: an inner scope is still open (close scopes in reverse order)")
		}
		d.scopes = d.scopes[:len(d.scopes)-1]
	}
	s.closed = true
	for _, st := range s.owned {
		if st.scope == s {
			d.releaseLocked(st)
		}
	}
	s.owned = nil
}

// Keep moves t's storage (shared by all its views) out of its scope into the enclosing
// one, or out of all scopes if its scope is outermost, so it survives the scope's Close.
// It returns t.
func (t *Tensor) Keep() *Tensor {
	d := t.st.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	t.checkLive("Keep")
	st := t.st
	if st.scope == nil {
		return t
	}
	st.scope = st.scope.parent
	if st.scope != nil {
		st.scope.owned = append(st.scope.owned, st)
	}
	return t
}

// Release returns t's storage to the pool now, before its scope closes. Every view of the
// storage becomes unusable: using one panics. Releasing twice does nothing.
func (t *Tensor) Release() {
	d := t.st.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	d.releaseLocked(t.st)
}

// NoGrad runs fn with gradient recording turned off for tensors on d: ops run inside fn
// record no graph, as under PyTorch's torch.no_grad(). Calls nest.
func (d *Device) NoGrad(fn func()) {
	d.mu.Lock()
	d.noGrad++
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		d.noGrad--
		d.mu.Unlock()
	}()
	fn()
}

// withGrad runs fn with gradient recording on, whatever the enclosing mode (recomputation
// inside backward needs it).
func (d *Device) withGrad(fn func()) {
	d.mu.Lock()
	saved := d.noGrad
	d.noGrad = 0
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		d.noGrad = saved
		d.mu.Unlock()
	}()
	fn()
}

// GradEnabled reports whether ops on d record the graph for autograd.
func (d *Device) GradEnabled() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.noGrad == 0
}
