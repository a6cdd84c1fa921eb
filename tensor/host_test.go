package tensor_test

import (
	"encoding/binary"
	"math"
	"testing"

	"megago/tensor"
)

// HostBytes is checked against the little-endian encoding written out by hand, and
// against ToSlice after a write through it.
func TestHostBytes(t *testing.T) {
	dev := tensor.NewCPU()
	x := tensor.FromSlice(dev, []float32{1, -2.5, 3, 4, 5, 6}, 3, 2)
	view := x.Narrow(0, 1, 2) // rows 1 and 2: elements 2..5, a view at offset 2
	b := view.HostBytes()
	if len(b) != 4*4 {
		t.Fatalf("len %d, want 16", len(b))
	}
	for i, want := range []float32{3, 4, 5, 6} {
		if got := math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])); got != want {
			t.Errorf("element %d: %v, want %v", i, got, want)
		}
	}
	binary.LittleEndian.PutUint32(b[4:], math.Float32bits(-7))
	if got := tensor.ToSlice[float32](x); got[3] != -7 || got[2] != 3 || got[4] != 5 {
		t.Errorf("after writing element 1 of the view: %v", got)
	}
	if cap(b) != len(b) {
		t.Errorf("cap %d reaches past the view's %d bytes", cap(b), len(b))
	}

	h := tensor.FromSlice(dev, []int64{1 << 40}, 1).HostBytes()
	if binary.LittleEndian.Uint64(h) != 1<<40 {
		t.Errorf("int64 bytes %v", h)
	}
	if e := tensor.Zeros(dev, tensor.F32, 0).HostBytes(); e != nil {
		t.Errorf("empty tensor: %v, want nil", e)
	}

	r := tensor.Zeros(dev, tensor.F32, 4)
	r.Release()
	defer func() {
		if recover() == nil {
			t.Error("HostBytes of a released tensor did not panic")
		}
	}()
	r.HostBytes()
}
