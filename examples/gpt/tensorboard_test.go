package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protowire"
)

// TestCRC32CCheckValue: CRC-32C (Castagnoli) of "123456789" is 0xE3069283 (the
// catalogued check value), and TFRecord's mask is rotate-right-15 plus 0xa282ead8.
func TestCRC32CCheckValue(t *testing.T) {
	b := []byte("123456789")
	c := uint32(0xE3069283)
	assert.Equal(t, c, crc32.Checksum(b, crc32c))
	assert.Equal(t, (c>>15|c<<17)+0xa282ead8, maskCRC(b))
}

func TestTensorBoardWriter(t *testing.T) {
	dir := t.TempDir()
	w, err := newTBWriter(dir)
	require.NoError(t, err)
	// Values that float32, TensorBoard's type, holds exactly.
	want := []scalar{{"lm loss", 1, 9.5}, {"learning-rate", 1, 0x1p-10}, {"lm loss", 2, 8.25}, {"grad-norm", 7, math.Inf(1)}}
	for _, s := range want {
		require.NoError(t, w.Scalar(s.tag, s.step, s.value))
	}
	require.NoError(t, w.Close())
	matches, err := filepath.Glob(filepath.Join(dir, "events.out.tfevents.*"))
	require.NoError(t, err)
	require.Len(t, matches, 1)

	version, got := readEvents(t, matches[0])
	assert.Equal(t, "brain.Event:2", version)
	assert.Equal(t, want, got)
}

// TestRunWritesTensorBoard: a run's event file holds Megatron's scalars for every
// iteration, and its loss plot is a PNG.
func TestRunWritesTensorBoard(t *testing.T) {
	out := t.TempDir()
	sum, _ := runTiny(t, tinyArgs(t, "--out-dir", out, "--train-iters", "3", "--gen-tokens", "0"))
	matches, err := filepath.Glob(filepath.Join(out, "tensorboard", "events.out.tfevents.*"))
	require.NoError(t, err)
	require.Len(t, matches, 1)
	_, scalars := readEvents(t, matches[0])
	byTag := map[string][]scalar{}
	for _, s := range scalars {
		byTag[s.tag] = append(byTag[s.tag], s)
	}
	for _, tag := range []string{"lm loss", "learning-rate", "grad-norm", "loss-scale", "throughput"} {
		assert.Len(t, byTag[tag], 3, tag)
	}
	for i, s := range byTag["lm loss"] {
		assert.Equal(t, i+1, s.step)
		assert.Equal(t, float64(float32(sum.Losses[i])), s.value, "TensorBoard keeps float32")
	}
	assert.Equal(t, 1.0, byTag["loss-scale"][0].value, "no loss scaling in fp32")
	assert.NotEmpty(t, byTag["lm loss validation"])
	assert.NotEmpty(t, byTag["lm loss validation ppl"])

	f, err := os.Open(filepath.Join(out, "loss.png"))
	require.NoError(t, err)
	defer f.Close()
	img, err := png.Decode(f)
	require.NoError(t, err)
	assert.Equal(t, plotW, img.Bounds().Dx())
}

type scalar struct {
	tag   string
	step  int
	value float64
}

// readEvents decodes an event file: it checks both CRCs of every record, and returns
// the file version of the first event and the scalars of the others.
func readEvents(t *testing.T, path string) (version string, scalars []scalar) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	for n := 0; len(b) > 0; n++ {
		require.GreaterOrEqual(t, len(b), 12, "record %d header", n)
		length := binary.LittleEndian.Uint64(b[:8])
		require.Equal(t, maskedCRC32C(b[:8]), binary.LittleEndian.Uint32(b[8:12]), "record %d length CRC", n)
		require.GreaterOrEqual(t, uint64(len(b)-16), length, "record %d length", n)
		data := b[12 : 12+length]
		require.Equal(t, maskedCRC32C(data), binary.LittleEndian.Uint32(b[12+length:16+length]), "record %d data CRC", n)
		b = b[16+length:]

		ev, err := decodeEvent(data)
		require.NoError(t, err, "record %d", n)
		assert.Greater(t, ev.wallTime, 1e9, "record %d wall time in seconds since 1970", n)
		if n == 0 {
			version = ev.fileVersion
			continue
		}
		scalars = append(scalars, ev.scalars...)
	}
	return version, scalars
}

// maskedCRC32C is TFRecord's checksum, written independently of maskCRC: CRC-32C by
// the bitwise definition (reflected polynomial 0x82F63B78), then the mask.
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
	scalars     []scalar
}

// decodeEvent decodes the fields of tensorflow.Event that the writer uses.
func decodeEvent(b []byte) (event, error) {
	var ev event
	step := 0
	var summaries [][]byte
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		switch {
		case num == 1 && typ == protowire.Fixed64Type:
			ev.wallTime = math.Float64frombits(x)
		case num == 2 && typ == protowire.VarintType:
			step = int(int64(x))
		case num == 3 && typ == protowire.BytesType:
			ev.fileVersion = string(v)
		case num == 5 && typ == protowire.BytesType:
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
			if num != 1 || typ != protowire.BytesType {
				return fmt.Errorf("unexpected Summary field %d", num)
			}
			sc := scalar{step: step}
			return eachField(v, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
				switch {
				case num == 1 && typ == protowire.BytesType:
					sc.tag = string(v)
				case num == 2 && typ == protowire.Fixed32Type:
					sc.value = float64(math.Float32frombits(uint32(x)))
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
