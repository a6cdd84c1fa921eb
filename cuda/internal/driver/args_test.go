package driver

import (
	"bytes"
	"encoding/binary"
	"math"
	"testing"
)

func TestKernelArgsPacking(t *testing.T) {
	a := NewKernelArgs().Ptr(0xdead0000beef).I32(-3).F32(1.5).I64(-1 << 40).F64(math.Pi).U32(7)
	blob := []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	a.Bytes(blob)
	a.I32(99) // after a 2-slot struct
	le := binary.LittleEndian
	checks := []struct {
		name string
		want []byte
	}{
		{"ptr", le.AppendUint64(nil, 0xdead0000beef)},
		{"i32", le.AppendUint32(nil, uint32(0xfffffffd))},
		{"f32", le.AppendUint32(nil, math.Float32bits(1.5))},
		{"i64", le.AppendUint64(nil, uint64(0xffffff0000000000))},
		{"f64", le.AppendUint64(nil, math.Float64bits(math.Pi))},
		{"u32", le.AppendUint32(nil, 7)},
		{"struct", blob},
		{"i32 after struct", le.AppendUint32(nil, 99)},
	}
	if a.Len() != len(checks) {
		t.Fatalf("%d arguments, want %d", a.Len(), len(checks))
	}
	for i, c := range checks {
		if got := a.bytesAt(i, len(c.want)); !bytes.Equal(got, c.want) {
			t.Errorf("argument %d (%s): bytes % x, want % x", i, c.name, got, c.want)
		}
		if uintptrOf(a, i)%8 != 0 {
			t.Errorf("argument %d (%s) not 8-byte aligned", i, c.name)
		}
	}
}
