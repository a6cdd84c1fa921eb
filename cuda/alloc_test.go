package cuda

import (
	"errors"
	"megago/cuda/internal/driver"
	"strings"
	"testing"
)

// fakeMem is a device with capacity bytes: allocations are addresses counting up.
type fakeMem struct {
	capacity, used int64
	next           driver.DevicePtr
	live           map[driver.DevicePtr]int64
	allocs, frees  int
}

func newFakeMem(capacity int64) *fakeMem {
	return &fakeMem{capacity: capacity, next: 1 << 20, live: map[driver.DevicePtr]int64{}}
}

var errFakeOOM = errors.New("CUDA_ERROR_OUT_OF_MEMORY")

func (f *fakeMem) alloc(n int64) (driver.DevicePtr, error) {
	if f.used+n > f.capacity {
		return 0, errFakeOOM
	}
	p := f.next
	f.next += driver.DevicePtr(n)
	f.used += n
	f.live[p] = n
	f.allocs++
	return p, nil
}

func (f *fakeMem) free(p driver.DevicePtr) error {
	n, ok := f.live[p]
	if !ok {
		return errors.New("bad free")
	}
	delete(f.live, p)
	f.used -= n
	f.frees++
	return nil
}

func (f *fakeMem) memInfo() (int64, int64, error) { return f.capacity - f.used, f.capacity, nil }

func TestRoundSize(t *testing.T) {
	for _, c := range []struct{ n, want int64 }{
		{1, 512}, {512, 512}, {513, 1024}, {1<<20 - 1, 1 << 20}, {1 << 20, 2 << 20}, {3 << 20, 4 << 20}, {4 << 20, 4 << 20},
	} {
		if got := roundSize(c.n); got != c.want {
			t.Errorf("roundSize(%d) = %d, want %d", c.n, got, c.want)
		}
	}
}

func TestAllocatorReusesAndCounts(t *testing.T) {
	mem := newFakeMem(1 << 30)
	a := newAllocator(mem, "fake GPU")
	p1, _ := a.get(1000) // 1024-byte block
	p2, _ := a.get(3000) // 3072
	if st := a.Stats(); st.Allocated != 4096 || st.Reserved != 4096 || st.Peak != 4096 || st.Allocs != 2 {
		t.Fatalf("after two allocations: %+v", st)
	}
	a.put(p1)
	if st := a.Stats(); st.Allocated != 3072 || st.Reserved != 4096 || st.Peak != 4096 {
		t.Fatalf("after a free: %+v", st)
	}
	p3, _ := a.get(700) // same 1024-byte class: the cached block
	if p3 != p1 || mem.allocs != 2 {
		t.Errorf("request of the same class got %#x (driver allocations %d), want the cached %#x", p3, mem.allocs, p1)
	}
	if st := a.Stats(); st.CacheHits != 1 || st.Allocated != 4096 {
		t.Errorf("after a cache hit: %+v", st)
	}
	a.put(p2)
	a.put(p3)
	if freed := a.emptyCache(); freed != 4096 || mem.used != 0 || len(mem.live) != 0 {
		t.Errorf("emptyCache freed %d, driver still holds %d", freed, mem.used)
	}
	if st := a.Stats(); st.Reserved != 0 || st.Allocated != 0 || st.Peak != 4096 || st.Frees != 2 {
		t.Errorf("after emptying: %+v", st)
	}
	a.resetPeak()
	if st := a.Stats(); st.Peak != 0 {
		t.Errorf("peak after reset: %d", st.Peak)
	}
}

func TestAllocatorEmptiesCacheBeforeFailing(t *testing.T) {
	mem := newFakeMem(8 << 20)
	a := newAllocator(mem, "fake GPU")
	p, err := a.get(5 << 20) // a 6 MiB block
	if err != nil {
		t.Fatal(err)
	}
	a.put(p)                 // cached: the driver still has it
	q, err := a.get(3 << 20) // 4 MiB: fits only once the cached 6 MiB is given back
	if err != nil {
		t.Fatalf("allocation that fits after emptying the cache failed: %v", err)
	}
	if st := a.Stats(); st.OOMRecovered != 1 || st.Reserved != 4<<20 || st.Allocated != 4<<20 {
		t.Errorf("stats %+v", st)
	}
	_, err = a.get(5 << 20) // 6 MiB with 4 MiB held of 8: out of memory
	var oom *OutOfMemoryError
	if !errors.As(err, &oom) {
		t.Fatalf("got %v, want an *OutOfMemoryError", err)
	}
	if oom.Requested != 5<<20 || oom.Allocated != 4<<20 || oom.Free != 4<<20 || oom.Total != 8<<20 {
		t.Errorf("error fields %+v", oom)
	}
	msg := err.Error()
	for _, want := range []string{"out of memory on fake GPU", "tried to allocate 5.00 MiB", "megago holds 4.00 MiB in tensors",
		"4.00 MiB reserved", "4.00 MiB free of 8.00 MiB", "CUDA_ERROR_OUT_OF_MEMORY"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message lacks %q: %s", want, msg)
		}
	}
	if !errors.Is(err, errFakeOOM) {
		t.Error("the driver's error is not wrapped")
	}
	a.put(q)
}

func TestAllocatorDoubleFreePanics(t *testing.T) {
	a := newAllocator(newFakeMem(1<<20), "fake GPU")
	p, _ := a.get(10)
	a.put(p)
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "not a live block") {
			t.Errorf("double free: recovered %v", r)
		}
	}()
	a.put(p)
}

func TestFmtBytes(t *testing.T) {
	for _, c := range []struct {
		n    int64
		want string
	}{{0, "0 B"}, {1023, "1023 B"}, {1536, "1.50 KiB"}, {2 << 30, "2.00 GiB"}, {141 << 30, "141.00 GiB"}} {
		if got := fmtBytes(c.n); got != c.want {
			t.Errorf("fmtBytes(%d) = %q, want %q", c.n, got, c.want)
		}
	}
}
