package cuda

import (
	"fmt"
	"megago/cuda/internal/driver"
	"sync"
)

// memAPI is what the caching allocator needs from a device: stream-ordered allocation
// and release, and the device's free and total memory (for error messages).
type memAPI interface {
	alloc(bytes int64) (driver.DevicePtr, error)
	free(p driver.DevicePtr) error
	memInfo() (free, total int64, err error)
}

// Allocation granularity: blocks are rounded up to 512 bytes below 1 MiB and to 2 MiB
// above, so that buffers of nearby sizes share cached blocks (PyTorch's caching
// allocator rounds alike).
const (
	smallRound = 512
	largeRound = 2 << 20
	largeMin   = 1 << 20
)

// roundSize returns the block size the allocator uses for a request of n bytes (> 0).
func roundSize(n int64) int64 {
	if n <= 0 {
		return smallRound
	}
	r := int64(smallRound)
	if n >= largeMin {
		r = largeRound
	}
	return (n + r - 1) / r * r
}

// MemStats are a device's memory statistics, in bytes.
type MemStats struct {
	Allocated    int64 // in blocks handed out and not yet returned
	Reserved     int64 // obtained from the driver: Allocated plus the cache
	Peak         int64 // the largest Allocated so far
	Allocs       int64 // blocks obtained from the driver
	Frees        int64 // blocks given back to the driver
	CacheHits    int64 // requests served from the cache
	OOMRecovered int64 // allocations that succeeded after emptying the cache
}

// allocator is a caching, stream-ordered allocator: a block freed by the program goes to
// a free list of its rounded size and is handed out again without asking the driver.
// Work is queued on one stream, so a block reused by a later kernel is only touched
// after the earlier kernels that used it. When the driver is out of memory the cache is
// given back and the allocation tried once more.
type allocator struct {
	mem  memAPI
	name string // the device, for errors

	mu    sync.Mutex
	cache map[int64][]driver.DevicePtr // free blocks by size
	size  map[driver.DevicePtr]int64   // live blocks
	stats MemStats
}

func newAllocator(mem memAPI, name string) *allocator {
	return &allocator{mem: mem, name: name, cache: map[int64][]driver.DevicePtr{}, size: map[driver.DevicePtr]int64{}}
}

// OutOfMemoryError is an allocation the device could not satisfy even after the cache
// was emptied: how much was asked, and what megago and the device hold.
type OutOfMemoryError struct {
	Device     string
	Requested  int64 // bytes asked for (before rounding)
	Allocated  int64 // bytes megago holds in live blocks
	Reserved   int64 // bytes megago holds from the driver
	Free       int64 // bytes the device reports free (-1 when unknown)
	Total      int64 // bytes of the device (-1 when unknown)
	DriverErr  error
	CacheFreed int64 // bytes given back while trying
}

func (e *OutOfMemoryError) Error() string {
	s := fmt.Sprintf("cuda: out of memory on %s: tried to allocate %s; megago holds %s in tensors, %s reserved",
		e.Device, fmtBytes(e.Requested), fmtBytes(e.Allocated), fmtBytes(e.Reserved))
	if e.Total >= 0 {
		s += fmt.Sprintf("; the device has %s free of %s", fmtBytes(e.Free), fmtBytes(e.Total))
	}
	if e.DriverErr != nil {
		s += " (" + e.DriverErr.Error() + ")"
	}
	return s
}

func (e *OutOfMemoryError) Unwrap() error { return e.DriverErr }

// fmtBytes formats a byte count with a binary unit: "512 B", "1.50 KiB", "2.00 GiB".
func fmtBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.2f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}

// get returns a block of at least n bytes.
func (a *allocator) get(n int64) (driver.DevicePtr, error) {
	sz := roundSize(n)
	a.mu.Lock()
	defer a.mu.Unlock()
	if l := a.cache[sz]; len(l) > 0 {
		p := l[len(l)-1]
		a.cache[sz] = l[:len(l)-1]
		a.size[p] = sz
		a.stats.CacheHits++
		a.take(sz)
		return p, nil
	}
	p, err := a.mem.alloc(sz)
	freed := int64(0)
	if err != nil {
		freed = a.emptyLocked()
		p, err = a.mem.alloc(sz)
		if err == nil {
			a.stats.OOMRecovered++
		}
	}
	if err != nil {
		e := &OutOfMemoryError{Device: a.name, Requested: n, Allocated: a.stats.Allocated, Reserved: a.stats.Reserved,
			Free: -1, Total: -1, DriverErr: err, CacheFreed: freed}
		if f, t, ierr := a.mem.memInfo(); ierr == nil {
			e.Free, e.Total = f, t
		}
		return 0, e
	}
	a.size[p] = sz
	a.stats.Allocs++
	a.stats.Reserved += sz
	a.take(sz)
	return p, nil
}

func (a *allocator) take(sz int64) {
	a.stats.Allocated += sz
	a.stats.Peak = max(a.stats.Peak, a.stats.Allocated)
}

// put returns block p to the cache. It panics if p is not a live block of this
// allocator (a double free).
func (a *allocator) put(p driver.DevicePtr) {
	a.mu.Lock()
	defer a.mu.Unlock()
	sz, ok := a.size[p]
	if !ok {
		panic(fmt.Sprintf("cuda: free of %#x, which is not a live block (freed twice?)", uintptr(p)))
	}
	delete(a.size, p)
	a.cache[sz] = append(a.cache[sz], p)
	a.stats.Allocated -= sz
}

// emptyCache gives every cached block back to the driver and returns the bytes freed.
func (a *allocator) emptyCache() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.emptyLocked()
}

func (a *allocator) emptyLocked() int64 {
	var freed int64
	for sz, l := range a.cache {
		for _, p := range l {
			// A block the driver refuses to free is dropped from the books all the
			// same: keeping it cached would hand out memory in an unknown state.
			_ = a.mem.free(p)
			freed += sz
			a.stats.Frees++
		}
		delete(a.cache, sz)
	}
	a.stats.Reserved -= freed
	return freed
}

// Stats returns the statistics so far.
func (a *allocator) Stats() MemStats {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stats
}

// resetPeak sets Peak to the current Allocated.
func (a *allocator) resetPeak() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.stats.Peak = a.stats.Allocated
}
