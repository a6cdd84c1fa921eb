package data

import (
	"encoding/binary"
	"fmt"
)

// The .idx layout (MEGATRON-FACTS.md, "Indexed dataset"); all integers little-endian, no
// padding:
//
//	offset     size  field
//	0          9     magic "MMIDIDX\0\0"
//	9          8     version, u64 = 1
//	17         1     dtype code, u8
//	18         8     N = sequence_count, u64
//	26         8     D = document_count (documents + 1), u64
//	34         4N    sequence_lengths, int32[N]
//	34+4N      8N    sequence_pointers, int64[N] (byte offsets in .bin)
//	34+12N     8D    document_indices, int64[D]
//	34+12N+8D  N     sequence_modes, int8[N] (optional, multimodal only)
const (
	idxMagic      = "MMIDIDX\x00\x00"
	idxVersion    = 1
	offVersion    = 9
	offDType      = 17
	offSeqCount   = 18
	offDocCount   = 26
	idxHeaderSize = 34
)

// IndexError reports an indexed-dataset file that breaks the format: the file, the field
// (Megatron's name, with the element index for arrays) and the byte offset of that field in
// the file.
type IndexError struct {
	File   string // path of the .idx (or .bin) file
	Field  string // "magic", "version", "dtype", "sequence_count", "sequence_lengths[3]", ...
	Offset int64  // byte offset of Field in File
	Msg    string // what is wrong
}

// Error returns "data: FILE: FIELD at byte offset OFFSET: MSG".
func (e *IndexError) Error() string {
	return fmt.Sprintf("data: %s: %s at byte offset %d: %s", e.File, e.Field, e.Offset, e.Msg)
}

// index is a validated .idx file held as its raw bytes (mapped or in memory); accessors
// decode fields on demand, so opening a dataset allocates nothing per sequence.
type index struct {
	b        []byte
	dtype    DType
	n, d     int  // sequence_count, document_count
	hasModes bool // the file ends with N sequence-mode bytes
}

func (x *index) offLengths() int  { return idxHeaderSize }
func (x *index) offPointers() int { return idxHeaderSize + 4*x.n }
func (x *index) offDocs() int     { return idxHeaderSize + 12*x.n }
func (x *index) offModes() int    { return idxHeaderSize + 12*x.n + 8*x.d }

// length returns sequence_lengths[i].
func (x *index) length(i int) int {
	return int(int32(binary.LittleEndian.Uint32(x.b[idxHeaderSize+4*i:])))
}

// pointer returns sequence_pointers[i].
func (x *index) pointer(i int) int64 {
	return int64(binary.LittleEndian.Uint64(x.b[x.offPointers()+8*i:]))
}

// doc returns document_indices[j].
func (x *index) doc(j int) int {
	return int(int64(binary.LittleEndian.Uint64(x.b[x.offDocs()+8*j:])))
}

// mode returns sequence_modes[i]; the index must have modes.
func (x *index) mode(i int) int8 { return int8(x.b[x.offModes()+i]) }

// parseIndex validates b, the contents of the .idx file named name, against a .bin file
// named binName of binSize bytes. It reads only within b and allocates nothing sized by a
// header field; every error is an *IndexError.
func parseIndex(name string, b []byte, binName string, binSize int64) (*index, error) {
	bad := func(field string, off int, format string, args ...any) error {
		return &IndexError{File: name, Field: field, Offset: int64(off), Msg: fmt.Sprintf(format, args...)}
	}
	le := binary.LittleEndian
	size := len(b)
	header := []struct {
		field    string
		off, end int
	}{
		{"magic", 0, offVersion}, {"version", offVersion, offDType}, {"dtype", offDType, offSeqCount},
		{"sequence_count", offSeqCount, offDocCount}, {"document_count", offDocCount, idxHeaderSize},
	}
	for _, h := range header {
		if size < h.end {
			return nil, bad(h.field, h.off, "file truncated: it has %d bytes, the header needs %d", size, idxHeaderSize)
		}
	}
	if string(b[:offVersion]) != idxMagic {
		return nil, bad("magic", 0, "got % x, want % x (\"MMIDIDX\\0\\0\"): not a Megatron indexed dataset", b[:offVersion], idxMagic)
	}
	if v := le.Uint64(b[offVersion:]); v != idxVersion {
		return nil, bad("version", offVersion, "got %d, want %d", v, idxVersion)
	}
	dtype := DType(b[offDType])
	if !dtype.Valid() {
		return nil, bad("dtype", offDType, "unknown dtype code %d (known: 1-8)", uint8(dtype))
	}
	// Check N and D against the file size before using them, in uint64 so that no product
	// can overflow: each is compared with what the remaining bytes can hold.
	rest := uint64(size - idxHeaderSize)
	n64 := le.Uint64(b[offSeqCount:])
	if n64 > rest/12 {
		return nil, bad("sequence_count", offSeqCount, "%d sequences need %d bytes of lengths and pointers from byte %d, the file has %d bytes (truncated?)",
			n64, satMul(n64, 12), idxHeaderSize, size)
	}
	rest -= 12 * n64
	d64 := le.Uint64(b[offDocCount:])
	if d64 < 1 {
		return nil, bad("document_count", offDocCount, "got 0, want at least 1 (the document indices start with 0)")
	}
	if d64 > rest/8 {
		return nil, bad("document_count", offDocCount, "%d document indices need %d bytes from byte %d, the file has %d bytes (truncated?)",
			d64, satMul(d64, 8), idxHeaderSize+12*n64, size)
	}
	rest -= 8 * d64
	x := &index{b: b, dtype: dtype, n: int(n64), d: int(d64)}
	switch {
	case rest == n64 && n64 > 0:
		x.hasModes = true
	case rest != 0:
		return nil, bad("sequence_modes", x.offModes(), "%d bytes follow the document indices, want 0 or %d (one mode per sequence)", rest, n64)
	}
	if err := x.checkSequences(name, binName, binSize); err != nil {
		return nil, err
	}
	if err := x.checkDocuments(name); err != nil {
		return nil, err
	}
	return x, nil
}

// checkSequences checks that lengths are non-negative, that the pointers start at 0 and follow
// p[i+1] = p[i] + len[i]·itemsize, and that the sequences exactly fill the .bin file.
func (x *index) checkSequences(name, binName string, binSize int64) error {
	item := int64(x.dtype.Size())
	var want int64 // where sequence i must start; never exceeds binSize + 2^31·8
	for i := range x.n {
		n := x.length(i)
		if n < 0 {
			return &IndexError{File: name, Field: fmt.Sprintf("sequence_lengths[%d]", i), Offset: int64(x.offLengths() + 4*i),
				Msg: fmt.Sprintf("negative length %d", n)}
		}
		p := x.pointer(i)
		if p != want {
			return &IndexError{File: name, Field: fmt.Sprintf("sequence_pointers[%d]", i), Offset: int64(x.offPointers() + 8*i),
				Msg: fmt.Sprintf("got %d, want %d (the previous pointer plus the previous length times %d bytes)", p, want, item)}
		}
		want = p + int64(n)*item
		if want > binSize {
			return &IndexError{File: name, Field: fmt.Sprintf("sequence_lengths[%d]", i), Offset: int64(x.offLengths() + 4*i),
				Msg: fmt.Sprintf("sequence %d of %d tokens at byte %d runs to byte %d, past the end of %s (%d bytes)", i, n, p, want, binName, binSize)}
		}
	}
	if want != binSize {
		return &IndexError{File: binName, Field: "file size", Offset: want,
			Msg: fmt.Sprintf("the file has %d bytes, but the %d sequences of %s end at byte %d", binSize, x.n, name, want)}
	}
	return nil
}

// checkDocuments checks that the document indices run from 0 to N without decreasing.
func (x *index) checkDocuments(name string) error {
	bad := func(j int, format string, args ...any) error {
		return &IndexError{File: name, Field: fmt.Sprintf("document_indices[%d]", j), Offset: int64(x.offDocs() + 8*j),
			Msg: fmt.Sprintf(format, args...)}
	}
	if d0 := x.doc(0); d0 != 0 {
		return bad(0, "got %d, want 0", d0)
	}
	prev := 0
	for j := 1; j < x.d; j++ {
		dj := x.doc(j)
		if dj < prev {
			return bad(j, "got %d, less than document_indices[%d] = %d (not monotonic)", dj, j-1, prev)
		}
		if dj > x.n {
			return bad(j, "got %d, past sequence_count %d", dj, x.n)
		}
		prev = dj
	}
	if prev != x.n {
		return bad(x.d-1, "last boundary is %d, want sequence_count %d", prev, x.n)
	}
	return nil
}

// satMul returns a·b, or the largest uint64 if that overflows.
func satMul(a, b uint64) uint64 {
	if b != 0 && a > ^uint64(0)/b {
		return ^uint64(0)
	}
	return a * b
}
