package report

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// TensorBoard event files, written without TensorFlow: a file of TFRecords, each an
// Event protocol buffer. The first event holds the file version; each later one a
// Summary with one scalar.
//
// TFRecord framing (tensorflow/core/lib/io/record_writer.cc), little-endian:
//
//	uint64 length
//	uint32 masked CRC-32C of the 8 length bytes
//	byte   data[length]
//	uint32 masked CRC-32C of data
//
// with mask(crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8.
//
// The messages (tensorflow/core/util/event.proto, framework/summary.proto), of which
// only these fields are written:
//
//	Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//	Summary { repeated Value value = 1; }
//	Value   { string tag = 1; float simple_value = 2; }

// Field numbers of the messages above.
const (
	eventWallTime    = 1
	eventStep        = 2
	eventFileVersion = 3
	eventSummary     = 5
	summaryValue     = 1
	valueTag         = 1
	valueSimple      = 2
)

var crc32c = crc32.MakeTable(crc32.Castagnoli)

// maskCRC is TFRecord's masked CRC-32C.
func maskCRC(b []byte) uint32 {
	c := crc32.Checksum(b, crc32c)
	return (c>>15 | c<<17) + 0xa282ead8
}

// TB appends scalars to one TensorBoard event file.
type TB struct {
	f   *os.File
	w   *bufio.Writer
	now func() time.Time
}

// NewTB creates dir and an event file in it named as TensorFlow names them
// (events.out.tfevents.SECONDS.HOST), and writes the file-version event.
func NewTB(dir string) (*TB, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	if host == "" {
		host = "localhost"
	}
	now := time.Now()
	name := filepath.Join(dir, fmt.Sprintf("events.out.tfevents.%d.%s.%d", now.Unix(), host, os.Getpid()))
	f, err := os.Create(name)
	if err != nil {
		return nil, err
	}
	t := &TB{f: f, w: bufio.NewWriter(f), now: time.Now}
	ev := appendEventHeader(nil, now, 0)
	ev = protowire.AppendTag(ev, eventFileVersion, protowire.BytesType)
	ev = protowire.AppendString(ev, "brain.Event:2")
	return t, t.record(ev)
}

// Path returns the event file's path.
func (t *TB) Path() string { return t.f.Name() }

// Scalar writes one scalar at a step.
func (t *TB) Scalar(tag string, step int, v float64) error {
	var val []byte
	val = protowire.AppendTag(val, valueTag, protowire.BytesType)
	val = protowire.AppendString(val, tag)
	val = protowire.AppendTag(val, valueSimple, protowire.Fixed32Type)
	val = protowire.AppendFixed32(val, math.Float32bits(float32(v)))
	var sum []byte
	sum = protowire.AppendTag(sum, summaryValue, protowire.BytesType)
	sum = protowire.AppendBytes(sum, val)
	ev := appendEventHeader(nil, t.now(), step)
	ev = protowire.AppendTag(ev, eventSummary, protowire.BytesType)
	ev = protowire.AppendBytes(ev, sum)
	return t.record(ev)
}

func appendEventHeader(b []byte, at time.Time, step int) []byte {
	b = protowire.AppendTag(b, eventWallTime, protowire.Fixed64Type)
	b = protowire.AppendFixed64(b, math.Float64bits(float64(at.UnixNano())/1e9))
	b = protowire.AppendTag(b, eventStep, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(int64(step)))
}

// record writes one TFRecord.
func (t *TB) record(data []byte) error {
	var head [12]byte
	binary.LittleEndian.PutUint64(head[:8], uint64(len(data)))
	binary.LittleEndian.PutUint32(head[8:], maskCRC(head[:8]))
	var tail [4]byte
	binary.LittleEndian.PutUint32(tail[:], maskCRC(data))
	for _, b := range [][]byte{head[:], data, tail[:]} {
		if _, err := t.w.Write(b); err != nil {
			return fmt.Errorf("tensorboard: %w", err)
		}
	}
	return nil
}

// Flush writes buffered events to the file, so TensorBoard sees them while training.
func (t *TB) Flush() error { return t.w.Flush() }

// Close flushes and closes the file.
func (t *TB) Close() error {
	err := t.w.Flush()
	if e := t.f.Close(); err == nil {
		err = e
	}
	return err
}
