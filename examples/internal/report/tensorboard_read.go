package report

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"

	"google.golang.org/protobuf/encoding/protowire"
)

// Scalar is one scalar of an event file.
type Scalar struct {
	Tag   string
	Step  int
	Value float64
}

// ReadEvents decodes an event file as TensorBoard reads it, for tests: it checks both
// CRCs of every record (with a CRC-32C computed bitwise, independently of the writer's
// table) and returns the file version of the first event and the scalars of the others.
// It returns an error for anything the writer does not write.
func ReadEvents(path string) (version string, scalars []Scalar, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", nil, err
	}
	for n := 0; len(b) > 0; n++ {
		if len(b) < 16 {
			return "", nil, fmt.Errorf("%s: record %d: %d bytes left, want a 12-byte header and a 4-byte CRC", path, n, len(b))
		}
		length := binary.LittleEndian.Uint64(b[:8])
		if maskedCRC32C(b[:8]) != binary.LittleEndian.Uint32(b[8:12]) {
			return "", nil, fmt.Errorf("%s: record %d: bad length CRC", path, n)
		}
		if uint64(len(b)-16) < length {
			return "", nil, fmt.Errorf("%s: record %d: length %d beyond the file", path, n, length)
		}
		data := b[12 : 12+length]
		if maskedCRC32C(data) != binary.LittleEndian.Uint32(b[12+length:16+length]) {
			return "", nil, fmt.Errorf("%s: record %d: bad data CRC", path, n)
		}
		b = b[16+length:]
		ev, err := decodeEvent(data)
		if err != nil {
			return "", nil, fmt.Errorf("%s: record %d: %w", path, n, err)
		}
		if ev.wallTime < 1e9 {
			return "", nil, fmt.Errorf("%s: record %d: wall time %g is not in seconds since 1970", path, n, ev.wallTime)
		}
		if n == 0 {
			version = ev.fileVersion
			continue
		}
		scalars = append(scalars, ev.scalars...)
	}
	return version, scalars, nil
}

// maskedCRC32C is TFRecord's checksum by the bitwise definition of CRC-32C (reflected
// polynomial 0x82F63B78), then the mask.
func maskedCRC32C(b []byte) uint32 {
	c := ^uint32(0)
	for _, x := range b {
		c ^= uint32(x)
		for range 8 {
			c = c>>1 ^ 0x82F63B78&-(c&1)
		}
	}
	c = ^c
	return (c>>15 | c<<17) + 0xa282ead8
}

type event struct {
	wallTime    float64
	fileVersion string
	scalars     []Scalar
}

// decodeEvent decodes the fields of tensorflow.Event that the writer uses.
func decodeEvent(b []byte) (event, error) {
	var ev event
	step := 0
	var summaries [][]byte
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		switch {
		case num == eventWallTime && typ == protowire.Fixed64Type:
			ev.wallTime = math.Float64frombits(x)
		case num == eventStep && typ == protowire.VarintType:
			step = int(int64(x))
		case num == eventFileVersion && typ == protowire.BytesType:
			ev.fileVersion = string(v)
		case num == eventSummary && typ == protowire.BytesType:
			summaries = append(summaries, v)
		default:
			return fmt.Errorf("unexpected Event field %d type %d", num, typ)
		}
		return nil
	})
	if err != nil {
		return ev, err
	}
	for _, s := range summaries {
		err := eachField(s, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
			if num != summaryValue || typ != protowire.BytesType {
				return fmt.Errorf("unexpected Summary field %d", num)
			}
			sc := Scalar{Step: step}
			return eachField(v, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
				switch {
				case num == valueTag && typ == protowire.BytesType:
					sc.Tag = string(v)
				case num == valueSimple && typ == protowire.Fixed32Type:
					sc.Value = float64(math.Float32frombits(uint32(x)))
					ev.scalars = append(ev.scalars, sc)
				default:
					return fmt.Errorf("unexpected Summary.Value field %d", num)
				}
				return nil
			})
		})
		if err != nil {
			return ev, err
		}
	}
	return ev, nil
}

// eachField calls fn for each field of a protobuf message: bytes fields with their
// contents, numeric fields with their value.
func eachField(b []byte, fn func(protowire.Number, protowire.Type, []byte, uint64) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		var v []byte
		var x uint64
		switch typ {
		case protowire.VarintType:
			x, n = protowire.ConsumeVarint(b)
		case protowire.Fixed32Type:
			var x32 uint32
			x32, n = protowire.ConsumeFixed32(b)
			x = uint64(x32)
		case protowire.Fixed64Type:
			x, n = protowire.ConsumeFixed64(b)
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		default:
			return errors.New("unsupported wire type")
		}
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if err := fn(num, typ, v, x); err != nil {
			return err
		}
	}
	return nil
}
