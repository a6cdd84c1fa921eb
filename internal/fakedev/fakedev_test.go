package fakedev_test

import (
	"sync"
	"testing"

	"megago/internal/fakedev"
	"megago/tensor"
)

// TestConcurrentDevicesShareOneBackend: ranks are goroutines, each with its own device,
// and may share one backend; the handle table must stay consistent (run with -race).
func TestConcurrentDevicesShareOneBackend(t *testing.T) {
	const ranks, steps = 4, 20
	fake := fakedev.New()
	var wg sync.WaitGroup
	for r := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dev := tensor.NewDevice(fake)
			for range steps {
				s := dev.NewScope()
				x := tensor.Full(dev, tensor.F32, float64(r), 16, 16)
				y := tensor.Sum(tensor.MatMul(x, x))
				if got, want := y.Item(), float64(16*16*16*r*r); got != want {
					t.Errorf("rank %d: sum %v, want %v", r, got, want)
				}
				s.Close()
			}
			dev.EmptyCache()
		}()
	}
	wg.Wait()
	st := fake.Stats()
	if st.Live != 0 || st.Allocs != st.Frees {
		t.Errorf("after every device emptied its cache: %+v", st)
	}
	if st.DeviceToHost != ranks*steps || st.HostToDevice != 0 {
		t.Errorf("copies: %+v, want %d device→host and none host→device", st, ranks*steps)
	}
}
