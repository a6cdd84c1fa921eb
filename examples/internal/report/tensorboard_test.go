package report

import (
	"hash/crc32"
	"math"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCRC32CCheckValue: CRC-32C (Castagnoli) of "123456789" is 0xE3069283 (the
// catalogued check value), and TFRecord's mask is rotate-right-15 plus 0xa282ead8; the
// reader's bitwise CRC agrees.
func TestCRC32CCheckValue(t *testing.T) {
	b := []byte("123456789")
	c := uint32(0xE3069283)
	assert.Equal(t, c, crc32.Checksum(b, crc32c))
	assert.Equal(t, (c>>15|c<<17)+0xa282ead8, maskCRC(b))
	assert.Equal(t, maskCRC(b), maskedCRC32C(b))
}

func TestTensorBoardWriter(t *testing.T) {
	dir := t.TempDir()
	w, err := NewTB(dir)
	require.NoError(t, err)
	// Values that float32, TensorBoard's type, holds exactly.
	want := []Scalar{{"lm loss", 1, 9.5}, {"learning-rate", 1, 0x1p-10}, {"lm loss", 2, 8.25}, {"grad-norm", 7, math.Inf(1)}}
	for _, s := range want {
		require.NoError(t, w.Scalar(s.Tag, s.Step, s.Value))
	}
	require.NoError(t, w.Close())
	matches, err := filepath.Glob(filepath.Join(dir, "events.out.tfevents.*"))
	require.NoError(t, err)
	require.Len(t, matches, 1)

	version, got, err := ReadEvents(matches[0])
	require.NoError(t, err)
	assert.Equal(t, "brain.Event:2", version)
	assert.Equal(t, want, got)
}
