package data

import (
	"encoding/binary"
	"fmt"
	"math"
)

// DType is the element type of an indexed dataset's tokens, stored as one byte at offset 17
// of the .idx file. The codes are Megatron's.
type DType uint8

// The dtype codes of Megatron's indexed dataset.
const (
	Uint8   DType = 1
	Int8    DType = 2
	Int16   DType = 3
	Int32   DType = 4
	Int64   DType = 5
	Float64 DType = 6
	Float32 DType = 7
	Uint16  DType = 8
)

// dtypeInfo holds each code's name and size in bytes; index 0 is unused.
var dtypeInfo = [...]struct {
	name string
	size int
}{
	{"invalid", 0},
	Uint8:   {"uint8", 1},
	Int8:    {"int8", 1},
	Int16:   {"int16", 2},
	Int32:   {"int32", 4},
	Int64:   {"int64", 8},
	Float64: {"float64", 8},
	Float32: {"float32", 4},
	Uint16:  {"uint16", 2},
}

// Valid reports whether d is one of the eight codes.
func (d DType) Valid() bool { return d >= Uint8 && int(d) < len(dtypeInfo) }

// Size returns the number of bytes of one token. It panics if d is not valid.
func (d DType) Size() int {
	if !d.Valid() {
		panic(fmt.Sprintf("data: DType.Size: invalid dtype code %d", uint8(d)))
	}
	return dtypeInfo[d].size
}

// String returns the numpy name of d ("uint16"), or "dtype(N)" for an unknown code.
func (d DType) String() string {
	if !d.Valid() {
		return fmt.Sprintf("dtype(%d)", uint8(d))
	}
	return dtypeInfo[d].name
}

// ParseDType returns the DType whose String is name.
func ParseDType(name string) (DType, error) {
	for d := Uint8; d.Valid(); d++ {
		if d.String() == name {
			return d, nil
		}
	}
	return 0, fmt.Errorf("data: unknown dtype %q (known: uint8, int8, int16, int32, int64, float64, float32, uint16)", name)
}

// DTypeForVocab returns the dtype Megatron's writers choose for a vocabulary of vocabSize ids:
// Uint16 if vocabSize < 65500, else Int32.
func DTypeForVocab(vocabSize int) DType {
	if vocabSize < 65500 {
		return Uint16
	}
	return Int32
}

// fits reports whether id can be stored in d without changing its value.
func (d DType) fits(id int32) bool {
	switch d {
	case Uint8:
		return id >= 0 && id <= math.MaxUint8
	case Int8:
		return id >= math.MinInt8 && id <= math.MaxInt8
	case Int16:
		return id >= math.MinInt16 && id <= math.MaxInt16
	case Uint16:
		return id >= 0 && id <= math.MaxUint16
	case Float32:
		return id >= -(1<<24) && id <= 1<<24 // integers beyond 2^24 round in float32
	}
	return true
}

// appendEncoded appends ids encoded as d, little-endian, to dst. Values must fit (see fits).
func (d DType) appendEncoded(dst []byte, ids []int32) []byte {
	le := binary.LittleEndian
	for _, id := range ids {
		switch d {
		case Uint8, Int8:
			dst = append(dst, byte(id))
		case Int16, Uint16:
			dst = le.AppendUint16(dst, uint16(id))
		case Int32:
			dst = le.AppendUint32(dst, uint32(id))
		case Int64:
			dst = le.AppendUint64(dst, uint64(int64(id)))
		case Float32:
			dst = le.AppendUint32(dst, math.Float32bits(float32(id)))
		case Float64:
			dst = le.AppendUint64(dst, math.Float64bits(float64(id)))
		}
	}
	return dst
}

// appendDecoded appends the tokens of raw, encoded as d, to dst converted to int32. Values
// outside int32 (possible for int64 and the float types) are converted as Go's conversions
// do: int64 is truncated to its low 32 bits, floats are truncated toward zero with an
// implementation-defined result when out of range. len(raw) must be a multiple of d.Size().
func (d DType) appendDecoded(dst []int32, raw []byte) []int32 {
	le := binary.LittleEndian
	switch d {
	case Uint8:
		for _, b := range raw {
			dst = append(dst, int32(b))
		}
	case Int8:
		for _, b := range raw {
			dst = append(dst, int32(int8(b)))
		}
	case Int16:
		for i := 0; i+2 <= len(raw); i += 2 {
			dst = append(dst, int32(int16(le.Uint16(raw[i:]))))
		}
	case Uint16:
		for i := 0; i+2 <= len(raw); i += 2 {
			dst = append(dst, int32(le.Uint16(raw[i:])))
		}
	case Int32:
		for i := 0; i+4 <= len(raw); i += 4 {
			dst = append(dst, int32(le.Uint32(raw[i:])))
		}
	case Int64:
		for i := 0; i+8 <= len(raw); i += 8 {
			dst = append(dst, int32(int64(le.Uint64(raw[i:]))))
		}
	case Float32:
		for i := 0; i+4 <= len(raw); i += 4 {
			dst = append(dst, int32(math.Float32frombits(le.Uint32(raw[i:]))))
		}
	case Float64:
		for i := 0; i+8 <= len(raw); i += 8 {
			dst = append(dst, int32(math.Float64frombits(le.Uint64(raw[i:]))))
		}
	}
	return dst
}
