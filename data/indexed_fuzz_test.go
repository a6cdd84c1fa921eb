package data

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzReadIndex feeds arbitrary .idx bytes and .bin sizes to the index parser. It must never
// panic or read out of range; an accepted index must satisfy the invariants the accessors
// rely on, and every rejection must be an *IndexError.
func FuzzReadIndex(f *testing.F) {
	for _, dir := range []string{indexedTestdata, filepath.Join(indexedTestdata, "corrupt")} {
		names, _ := filepath.Glob(filepath.Join(dir, "*.idx"))
		for _, name := range names {
			idx, err := os.ReadFile(name)
			if err != nil {
				f.Fatal(err)
			}
			st, err := os.Stat(name[:len(name)-len(".idx")] + ".bin")
			if err != nil {
				f.Fatal(err)
			}
			f.Add(idx, uint32(st.Size()))
		}
	}
	f.Fuzz(func(t *testing.T, b []byte, binSize uint32) {
		x, err := parseIndex("f.idx", b, "f.bin", int64(binSize))
		if err != nil {
			var ie *IndexError
			if !errors.As(err, &ie) || ie.File == "" || ie.Field == "" || ie.Offset < 0 {
				t.Fatalf("rejection %v is not a complete *IndexError", err)
			}
			return
		}
		item := int64(x.dtype.Size())
		var end int64
		for i := range x.n {
			if x.pointer(i) != end || x.length(i) < 0 {
				t.Fatalf("accepted sequence %d at %d of length %d, want pointer %d", i, x.pointer(i), x.length(i), end)
			}
			end += int64(x.length(i)) * item
		}
		if end != int64(binSize) {
			t.Fatalf("accepted sequences ending at %d in a .bin of %d bytes", end, binSize)
		}
		prev := 0
		for j := range x.d {
			if x.doc(j) < prev || x.doc(j) > x.n {
				t.Fatalf("accepted document_indices[%d] = %d", j, x.doc(j))
			}
			prev = x.doc(j)
		}
		if x.doc(0) != 0 || prev != x.n {
			t.Fatalf("accepted document indices from %d to %d with %d sequences", x.doc(0), prev, x.n)
		}
		if x.hasModes {
			_ = x.mode(x.n - 1)
		}
	})
}
