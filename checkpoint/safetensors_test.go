package checkpoint

import (
	"bytes"
	"encoding/binary"
	"io"
	"strings"
	"testing"

	"megago/tensor"
)

// stFile returns a safetensors file of the given header JSON and data bytes.
func stFile(header string, data int) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	b = append(b, header...)
	return append(b, make([]byte, data)...)
}

// validFile returns a file of two tensors written by writeSafetensors.
func validFile(t testing.TB) []byte {
	var buf bytes.Buffer
	dev := tensor.NewCPU()
	a := tensor.FromSlice(dev, []float32{1, 2, 3, 4, 5, 6}, 2, 3)
	b := tensor.FromSlice(dev, []int64{7, -8}, 2)
	var ts []stTensor
	for _, x := range []struct {
		name string
		t    *tensor.Tensor
	}{{"a", a}, {"b<&>", b}} {
		p := &outPiece{name: x.name, dtype: x.t.DType(), shape: x.t.Shape(), t: x.t}
		ts = append(ts, p.stTensor())
	}
	if err := writeSafetensors(&buf, ts, map[string]string{"format": "pt", "k": `{"x": [1]}`}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestSafetensorsRoundTrip(t *testing.T) {
	b := validFile(t)
	n := binary.LittleEndian.Uint64(b)
	if n%8 != 0 {
		t.Errorf("header length %d is not padded to 8", n)
	}
	wantHeader := `{"__metadata__":{"format":"pt","k":"{\"x\": [1]}"},"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},` +
		`"b<&>":{"dtype":"I64","shape":[2],"data_offsets":[24,40]}}`
	if got := strings.TrimRight(string(b[8:8+n]), " "); got != wantHeader {
		t.Errorf("header\n%s\nwant\n%s", got, wantHeader)
	}
	h, err := ParseHeader(b)
	if err != nil {
		t.Fatal(err)
	}
	if h.Metadata["k"] != `{"x": [1]}` || len(h.Tensors) != 2 {
		t.Fatalf("header %+v", h)
	}
	a, _ := h.Lookup("a")
	if a.DType != tensor.F32 || !a.Shape.Equal(tensor.Shape{2, 3}) || a.Begin != 0 || a.End != 24 {
		t.Errorf("a: %+v", a)
	}
	vals := b[h.DataStart+a.Begin : h.DataStart+a.End]
	if got := tensor.ToSlice[float32](fromBytes(tensor.NewCPU(), a.DType, a.Shape, vals)); got[5] != 6 {
		t.Errorf("a = %v", got)
	}
}

// Headers that lie, truncated files and malformed JSON are refused with a message
// saying what is wrong.
func TestSafetensorsRejects(t *testing.T) {
	const f32x2 = `"dtype":"F32","shape":[2]`
	for _, tc := range []struct {
		name string
		file []byte
		want string
	}{
		{"empty", nil, "shorter than the 8-byte header length"},
		{"length past the end", binary.LittleEndian.AppendUint64(nil, 100), "header length 100 does not fit"},
		{"huge length", binary.LittleEndian.AppendUint64(nil, 1<<63), "does not fit"},
		{"not json", stFile("hello", 0), "not a JSON object"},
		{"array", stFile("[]", 0), "not a JSON object"},
		{"trailing data", stFile(`{} {}`, 0), "data after its JSON object"},
		{"invalid utf-8", stFile("{\"\xff\":1}", 0), "UTF-8"},
		{"truncated data", stFile(`{"a":{`+f32x2+`,"data_offsets":[0,8]}}`, 4), "past the 4-byte data section"},
		{"size mismatch", stFile(`{"a":{`+f32x2+`,"data_offsets":[0,12]}}`, 12), "do not hold F32 [2] (8 bytes)"},
		{"negative offset", stFile(`{"a":{`+f32x2+`,"data_offsets":[-8,0]}}`, 8), "do not hold"},
		{"overlap", stFile(`{"a":{`+f32x2+`,"data_offsets":[0,8]},"b":{`+f32x2+`,"data_offsets":[4,12]}}`, 12), "overlaps"},
		{"gap", stFile(`{"a":{`+f32x2+`,"data_offsets":[8,16]}}`, 16), "belong to no tensor"},
		{"unused tail", stFile(`{"a":{`+f32x2+`,"data_offsets":[0,8]}}`, 16), "end at byte 8 of a 16-byte data section"},
		{"unknown dtype", stFile(`{"a":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}}`, 2), "unsupported dtype"},
		{"negative dim", stFile(`{"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,0]}}`, 0), "out of range"},
		{"overflowing shape", stFile(`{"a":{"dtype":"F32","shape":[2147483647,2147483647,2147483647],"data_offsets":[0,0]}}`, 0), "overflows"},
		{"fractional dim", stFile(`{"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,6]}}`, 6), "cannot unmarshal"},
		{"missing field", stFile(`{"a":{"dtype":"F32","shape":[2]}}`, 8), "needs dtype, shape and data_offsets"},
		{"unknown field", stFile(`{"a":{`+f32x2+`,"data_offsets":[0,8],"x":1}}`, 8), "unknown field"},
		{"three offsets", stFile(`{"a":{`+f32x2+`,"data_offsets":[0,8,8]}}`, 8), "is not [begin, end]"},
		{"duplicate name", stFile(`{"a":{`+f32x2+`,"data_offsets":[0,8]},"a":{`+f32x2+`,"data_offsets":[8,16]}}`, 16), `names "a" twice`},
		{"metadata not strings", stFile(`{"__metadata__":{"a":1}}`, 0), "not a string"},
		{"metadata not an object", stFile(`{"__metadata__":[]}`, 0), "not an object"},
		{"empty name", stFile(`{"":{`+f32x2+`,"data_offsets":[0,8]}}`, 8), "empty name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseHeader(tc.file)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// FuzzSafetensorsHeader feeds arbitrary bytes to the header reader: it must return an
// error or a header whose tensors tile the data section, never panic or allocate more
// than the input's size.
func FuzzSafetensorsHeader(f *testing.F) {
	f.Add(validFile(f))
	f.Add(stFile(`{}`, 0))
	f.Add(stFile(`{"__metadata__":{"format":"megago"},"a":{"dtype":"BF16","shape":[0,3],"data_offsets":[0,0]}}`, 0))
	f.Add(stFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"I32","shape":[],"data_offsets":[8,12]}}   `, 12))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ReadHeader(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			return
		}
		at := h.DataStart
		for _, ti := range h.Tensors {
			if h.DataStart+ti.Begin != at || ti.End-ti.Begin != int64(ti.Shape.Numel()*ti.DType.Size()) {
				t.Fatalf("tensor %+v does not continue at %d", ti, at)
			}
			at = h.DataStart + ti.End
		}
		if at != int64(len(b)) {
			t.Fatalf("tensors end at %d of %d bytes", at, len(b))
		}
		if _, err := io.ReadAll(bytes.NewReader(b[h.DataStart:])); err != nil {
			t.Fatal(err)
		}
	})
}
