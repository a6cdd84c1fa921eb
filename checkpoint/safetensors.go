package checkpoint

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"unicode/utf8"

	"megago/tensor"
)

// The safetensors format (https://github.com/huggingface/safetensors): an 8-byte
// little-endian header length N, N bytes of JSON, then the data section. The JSON object
// maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end)} (byte offsets
// into the data section) and may hold "__metadata__", a map of strings. The header may
// end in spaces (writers pad it to a multiple of 8 bytes).

const (
	// stMaxHeader bounds the JSON header, as the reference implementation does.
	stMaxHeader = 100 << 20
	// stMaxRank bounds the rank of a stored tensor.
	stMaxRank = 16
	// stMetadataKey is the reserved name of the metadata map.
	stMetadataKey = "__metadata__"
)

// stDTypes maps safetensors dtype names to megago dtypes; other dtypes are refused.
var stDTypes = map[string]tensor.DType{
	"F64": tensor.F64, "F32": tensor.F32, "BF16": tensor.BF16, "F16": tensor.F16,
	"I32": tensor.I32, "I64": tensor.I64,
}

// stDTypeName returns the safetensors name of dt.
func stDTypeName(dt tensor.DType) string {
	for name, d := range stDTypes {
		if d == dt {
			return name
		}
	}
	panic(fmt.Sprintf("checkpoint: no safetensors name for dtype %v", dt))
}

// TensorInfo describes one tensor of a safetensors file: its data is bytes [Begin, End)
// of the data section.
type TensorInfo struct {
	Name       string
	DType      tensor.DType
	Shape      tensor.Shape
	Begin, End int64
}

// Header is a validated safetensors header.
type Header struct {
	// Tensors are sorted by Begin; they tile the data section exactly.
	Tensors []TensorInfo
	// Metadata is the "__metadata__" map (empty if absent).
	Metadata map[string]string
	// DataStart is the file offset of the data section (8 + the header length).
	DataStart int64
}

// Lookup returns the tensor called name.
func (h *Header) Lookup(name string) (TensorInfo, bool) {
	for _, t := range h.Tensors {
		if t.Name == name {
			return t, true
		}
	}
	return TensorInfo{}, false
}

// ReadHeader reads and validates the header of a safetensors file of size bytes. It
// allocates nothing larger than the header length, and only after checking that length
// against size; every tensor must have a supported dtype, a shape whose byte size equals
// its offsets, and the tensors must tile the data section without gaps or overlaps.
func ReadHeader(r io.ReaderAt, size int64) (*Header, error) {
	var lenBuf [8]byte
	if size < 8 {
		return nil, fmt.Errorf("safetensors: file of %d bytes is shorter than the 8-byte header length", size)
	}
	if _, err := r.ReadAt(lenBuf[:], 0); err != nil {
		return nil, fmt.Errorf("safetensors: reading the header length: %w", err)
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	if n > stMaxHeader || n > uint64(size-8) {
		return nil, fmt.Errorf("safetensors: header length %d does not fit a file of %d bytes (limit %d)", n, size, stMaxHeader)
	}
	js := make([]byte, n)
	if _, err := r.ReadAt(js, 8); err != nil {
		return nil, fmt.Errorf("safetensors: reading the %d-byte header: %w", n, err)
	}
	return parseHeader(js, size-8-int64(n))
}

// ParseHeader validates a whole safetensors file held in memory and returns its header.
func ParseHeader(file []byte) (*Header, error) {
	return ReadHeader(bytes.NewReader(file), int64(len(file)))
}

// stEntryJSON is one tensor's entry in the header.
type stEntryJSON struct {
	DType       *string  `json:"dtype"`
	Shape       *[]int64 `json:"shape"`
	DataOffsets *[]int64 `json:"data_offsets"`
}

// parseHeader parses the JSON header js of a file whose data section has dataLen bytes.
func parseHeader(js []byte, dataLen int64) (*Header, error) {
	if !utf8.Valid(js) {
		return nil, errors.New("safetensors: header is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, fmt.Errorf("safetensors: header is not a JSON object")
	}
	h := &Header{Metadata: map[string]string{}, DataStart: 8 + int64(len(js))}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("safetensors: header: %w", err)
		}
		name := tok.(string) // object keys are strings
		if seen[name] {
			return nil, fmt.Errorf("safetensors: header names %q twice", name)
		}
		seen[name] = true
		if name == stMetadataKey {
			if h.Metadata, err = decodeStringMap(dec); err != nil {
				return nil, err
			}
			continue
		}
		info, err := decodeEntry(dec, name)
		if err != nil {
			return nil, err
		}
		h.Tensors = append(h.Tensors, info)
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, fmt.Errorf("safetensors: header: %w", err)
	}
	if rest := js[dec.InputOffset():]; len(bytes.Trim(rest, " \t\r\n")) != 0 {
		return nil, errors.New("safetensors: header has data after its JSON object")
	}
	if err := checkTiling(h.Tensors, dataLen); err != nil {
		return nil, err
	}
	return h, nil
}

// decodeStringMap decodes the metadata object, refusing duplicate keys and non-strings.
func decodeStringMap(dec *json.Decoder) (map[string]string, error) {
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, errors.New("safetensors: __metadata__ is not an object")
	}
	m := map[string]string{}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("safetensors: __metadata__: %w", err)
		}
		v, err := dec.Token()
		s, ok := v.(string)
		if err != nil || !ok {
			return nil, fmt.Errorf("safetensors: __metadata__ value of %q is not a string", k)
		}
		if _, dup := m[k.(string)]; dup {
			return nil, fmt.Errorf("safetensors: __metadata__ names %q twice", k)
		}
		m[k.(string)] = s
	}
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("safetensors: __metadata__: %w", err)
	}
	return m, nil
}

// decodeEntry decodes and checks one tensor entry (not yet its place in the data).
func decodeEntry(dec *json.Decoder, name string) (TensorInfo, error) {
	fail := func(format string, a ...any) (TensorInfo, error) {
		return TensorInfo{}, fmt.Errorf("safetensors: tensor %q: %s", name, fmt.Sprintf(format, a...))
	}
	var e stEntryJSON
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return fail("%v", err)
	}
	ed := json.NewDecoder(bytes.NewReader(raw))
	ed.DisallowUnknownFields()
	if err := ed.Decode(&e); err != nil {
		return fail("%v", err)
	}
	if name == "" {
		return fail("empty name")
	}
	if e.DType == nil || e.Shape == nil || e.DataOffsets == nil {
		return fail("needs dtype, shape and data_offsets")
	}
	dt, ok := stDTypes[*e.DType]
	if !ok {
		return fail("unsupported dtype %q", *e.DType)
	}
	if len(*e.Shape) > stMaxRank {
		return fail("rank %d exceeds %d", len(*e.Shape), stMaxRank)
	}
	if len(*e.DataOffsets) != 2 {
		return fail("data_offsets %v is not [begin, end]", *e.DataOffsets)
	}
	info := TensorInfo{Name: name, DType: dt, Shape: make(tensor.Shape, len(*e.Shape)),
		Begin: (*e.DataOffsets)[0], End: (*e.DataOffsets)[1]}
	nbytes := int64(dt.Size())
	for i, d := range *e.Shape {
		if d < 0 || d > math.MaxInt32 {
			return fail("dim %d of shape %v out of range", i, *e.Shape)
		}
		if d != 0 && nbytes > math.MaxInt64/d {
			return fail("shape %v overflows", *e.Shape)
		}
		nbytes *= d
		info.Shape[i] = int(d)
	}
	if info.Begin < 0 || info.End < info.Begin || info.End-info.Begin != nbytes {
		return fail("data_offsets [%d, %d) do not hold %v %v (%d bytes)", info.Begin, info.End, *e.DType, *e.Shape, nbytes)
	}
	return info, nil
}

// checkTiling sorts ts by offset and checks that they cover [0, dataLen) exactly.
func checkTiling(ts []TensorInfo, dataLen int64) error {
	slices.SortStableFunc(ts, func(a, b TensorInfo) int {
		if a.Begin != b.Begin {
			return cmp.Compare(a.Begin, b.Begin)
		}
		return cmp.Compare(a.End, b.End)
	})
	var at int64
	for _, t := range ts {
		switch {
		case t.Begin < at:
			return fmt.Errorf("safetensors: tensor %q at bytes [%d, %d) overlaps the previous tensor (ending at %d)", t.Name, t.Begin, t.End, at)
		case t.Begin > at:
			return fmt.Errorf("safetensors: bytes [%d, %d) before tensor %q belong to no tensor", at, t.Begin, t.Name)
		case t.End > dataLen:
			return fmt.Errorf("safetensors: tensor %q ends at byte %d, past the %d-byte data section (truncated file?)", t.Name, t.End, dataLen)
		}
		at = t.End
	}
	if at != dataLen {
		return fmt.Errorf("safetensors: the tensors end at byte %d of a %d-byte data section", at, dataLen)
	}
	return nil
}

// stTensor is one tensor to write: its bytes come from write, which must write exactly
// the shape's byte size.
type stTensor struct {
	name  string
	dtype tensor.DType
	shape tensor.Shape
	write func(w io.Writer) error
}

func (t stTensor) nbytes() int64 { return int64(t.shape.Numel() * t.dtype.Size()) }

// encodeHeader returns the header of ts (in the given order, data laid out in that order)
// with meta (keys sorted), as compact JSON padded with spaces to a multiple of 8 bytes.
func encodeHeader(ts []stTensor, meta map[string]string) []byte {
	var b strings.Builder
	str := func(s string) {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(s) // a string always encodes
		b.Write(bytes.TrimSuffix(buf.Bytes(), []byte{'\n'}))
	}
	b.WriteByte('{')
	first := true
	sep := func() {
		if !first {
			b.WriteByte(',')
		}
		first = false
	}
	if len(meta) > 0 {
		sep()
		str(stMetadataKey)
		b.WriteString(":{")
		for i, k := range slices.Sorted(maps.Keys(meta)) {
			if i > 0 {
				b.WriteByte(',')
			}
			str(k)
			b.WriteByte(':')
			str(meta[k])
		}
		b.WriteByte('}')
	}
	var at int64
	for _, t := range ts {
		sep()
		str(t.name)
		fmt.Fprintf(&b, `:{"dtype":"%s","shape":[`, stDTypeName(t.dtype))
		for i, d := range t.shape {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprint(&b, d)
		}
		fmt.Fprintf(&b, `],"data_offsets":[%d,%d]}`, at, at+t.nbytes())
		at += t.nbytes()
	}
	b.WriteByte('}')
	for b.Len()%8 != 0 {
		b.WriteByte(' ')
	}
	return []byte(b.String())
}

// writeSafetensors writes ts (data in the given order) and meta to w.
func writeSafetensors(w io.Writer, ts []stTensor, meta map[string]string) error {
	hdr := encodeHeader(ts, meta)
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(hdr)))
	if _, err := w.Write(n[:]); err != nil {
		return err
	}
	if _, err := w.Write(hdr); err != nil {
		return err
	}
	for _, t := range ts {
		cw := &countWriter{w: w}
		if err := t.write(cw); err != nil {
			return err
		}
		if cw.n != t.nbytes() {
			panic(fmt.Sprintf("checkpoint: tensor %s wrote %d bytes, want %d", t.name, cw.n, t.nbytes()))
		}
	}
	return nil
}

// countWriter counts the bytes written through it.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
