package fakedev

import (
	"fmt"
	"sync"

	"megago/tensor"
)

// Name is the name the backend is registered under.
const Name = "fake"

func init() {
	tensor.Register(Name, func() (tensor.Backend, error) { return New(), nil })
}

// handle is the opaque Buffer the fake backend hands out.
type handle struct{ id uint64 }

// slot is the storage behind a handle.
type slot struct {
	buf tensor.Buffer // CPU backend storage
	dt  tensor.DType
	n   int
}

// Stats counts the traffic between host and device and the storage handed out.
type Stats struct {
	HostToDevice      int64 // WriteHost calls
	HostToDeviceBytes int64
	DeviceToHost      int64 // ReadHost calls
	DeviceToHostBytes int64
	Allocs            int64 // Alloc calls
	Frees             int64 // Free calls
	Poisons           int64 // buffers poisoned on their return to the pool
	Live              int64 // handles allocated and not freed
}

// Backend is the fake device backend. The zero value is not usable; use New.
type Backend struct {
	cpu    tensor.Backend
	poison tensor.Poisoner

	mu    sync.Mutex
	next  uint64
	slots map[uint64]slot
	stats Stats
}

// New returns a fake backend with an empty handle table. tensor.Open("fake") calls it.
func New() *Backend {
	cpu := tensor.NewCPU().Backend()
	p, ok := cpu.(tensor.Poisoner)
	if !ok {
		panic("fakedev: the CPU backend does not implement tensor.Poisoner")
	}
	return &Backend{cpu: cpu, poison: p, slots: map[uint64]slot{}}
}

// Of returns dev's backend as a fake backend. It panics if dev is on another backend.
func Of(dev *tensor.Device) *Backend {
	b, ok := dev.Backend().(*Backend)
	if !ok {
		panic(fmt.Sprintf("fakedev: device %v is not on the fake backend", dev))
	}
	return b
}

// Stats returns the counters so far.
func (b *Backend) Stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stats
}

// ResetStats sets the copy counters (not Live) to zero.
func (b *Backend) ResetStats() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stats = Stats{Live: b.stats.Live}
}

// PeekBytes returns a copy of the bytes of s's elements without counting a copy, even if
// s's buffer is back in the device's pool: tests use it to see that released storage was
// poisoned. It panics if the buffer was freed.
func (b *Backend) PeekBytes(s tensor.Span) []byte {
	s = b.span("PeekBytes", s)
	out := make([]byte, s.Numel()*s.DType.Size())
	b.cpu.ReadHost(s, out)
	return out
}

// Name returns "fake".
func (b *Backend) Name() string { return Name }

// Sync does nothing: the CPU kernels behind the handles have run when their methods
// return.
func (b *Backend) Sync() {}

// Alloc returns a new handle to n elements of dt, filled with 0xFF bytes.
func (b *Backend) Alloc(dt tensor.DType, n int) tensor.Buffer {
	buf := b.cpu.Alloc(dt, n)
	b.poison.Poison(buf, dt, n)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.next++
	b.slots[b.next] = slot{buf: buf, dt: dt, n: n}
	b.stats.Allocs++
	b.stats.Live++
	return &handle{id: b.next}
}

// Free removes the handle; later uses of it panic.
func (b *Backend) Free(buf tensor.Buffer) {
	h := b.handleOf("Free", buf)
	b.mu.Lock()
	defer b.mu.Unlock()
	sl, ok := b.slots[h.id]
	if !ok {
		panic(fmt.Sprintf("fakedev: Free: use of freed buffer #%d", h.id))
	}
	b.cpu.Free(sl.buf)
	delete(b.slots, h.id)
	b.stats.Frees++
	b.stats.Live--
}

// Poison fills the storage with 0xFF bytes (NaN for floats).
func (b *Backend) Poison(buf tensor.Buffer, dt tensor.DType, n int) {
	sl := b.slot("Poison", buf)
	if sl.dt != dt || sl.n != n {
		panic(fmt.Sprintf("fakedev: Poison: %d×%v for a buffer of %d×%v", n, dt, sl.n, sl.dt))
	}
	b.poison.Poison(sl.buf, dt, n)
	b.mu.Lock()
	b.stats.Poisons++
	b.mu.Unlock()
}

func (b *Backend) handleOf(op string, buf tensor.Buffer) *handle {
	h, ok := buf.(*handle)
	if !ok || h == nil {
		panic(fmt.Sprintf("fakedev: %s: buffer of type %T is not a fake-device handle", op, buf))
	}
	return h
}

func (b *Backend) slot(op string, buf tensor.Buffer) slot {
	h := b.handleOf(op, buf)
	b.mu.Lock()
	sl, ok := b.slots[h.id]
	b.mu.Unlock()
	if !ok {
		panic(fmt.Sprintf("fakedev: %s: use of freed buffer #%d", op, h.id))
	}
	return sl
}

// span translates s to the CPU storage behind its handle, checking that s lies inside
// the buffer and has its dtype. An empty span stays empty.
func (b *Backend) span(op string, s tensor.Span) tensor.Span {
	if s.Empty() {
		return s
	}
	sl := b.slot(op, s.Buf)
	if s.DType != sl.dt {
		panic(fmt.Sprintf("fakedev: %s: %v span of a %v buffer", op, s.DType, sl.dt))
	}
	if s.Off < 0 || s.Off+s.Numel() > sl.n {
		panic(fmt.Sprintf("fakedev: %s: span [%d, %d) outside a buffer of %d elements", op, s.Off, s.Off+s.Numel(), sl.n))
	}
	s.Buf = sl.buf
	return s
}

// strided translates s for Copy2D, checking rows of cols elements stride apart.
func (b *Backend) strided(op string, s tensor.Span, stride, rows, cols int) tensor.Span {
	sl := b.slot(op, s.Buf)
	if s.DType != sl.dt {
		panic(fmt.Sprintf("fakedev: %s: %v span of a %v buffer", op, s.DType, sl.dt))
	}
	if rows > 0 && cols > 0 {
		last := s.Off + (rows-1)*stride + cols
		if s.Off < 0 || last > sl.n || s.Off+cols > sl.n {
			panic(fmt.Sprintf("fakedev: %s: %d rows of %d at offset %d stride %d outside a buffer of %d elements", op, rows, cols, s.Off, stride, sl.n))
		}
	}
	s.Buf = sl.buf
	return s
}

// WriteHost copies host bytes to the device, counting one host→device copy.
func (b *Backend) WriteHost(dst tensor.Span, src []byte) {
	d := b.span("WriteHost", dst)
	if want := d.Numel() * d.DType.Size(); len(src) != want {
		panic(fmt.Sprintf("fakedev: WriteHost: %d bytes for %d×%v", len(src), d.Numel(), d.DType))
	}
	b.cpu.WriteHost(d, src)
	b.mu.Lock()
	b.stats.HostToDevice++
	b.stats.HostToDeviceBytes += int64(len(src))
	b.mu.Unlock()
}

// ReadHost copies device elements to host bytes, counting one device→host copy.
func (b *Backend) ReadHost(src tensor.Span, dst []byte) {
	s := b.span("ReadHost", src)
	if want := s.Numel() * s.DType.Size(); len(dst) != want {
		panic(fmt.Sprintf("fakedev: ReadHost: %d bytes for %d×%v", len(dst), s.Numel(), s.DType))
	}
	b.cpu.ReadHost(s, dst)
	b.mu.Lock()
	b.stats.DeviceToHost++
	b.stats.DeviceToHostBytes += int64(len(dst))
	b.mu.Unlock()
}
