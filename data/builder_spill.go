package data

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
)

// spillBufferSize is the write (and read) buffer of each temporary file of a builder.
const spillBufferSize = 256 << 10

// spillFile is a temporary file beside a builder's output, written through a buffer and,
// for the spilled index arrays, read back once or twice.
type spillFile struct {
	f *os.File
	w *bufio.Writer
	r *bufio.Reader // set by rewind
}

// newSpillFile creates "BASE.ext.RANDOM.tmp" in prefix's directory, where BASE is prefix's
// last element.
func newSpillFile(prefix, ext string) (*spillFile, error) {
	f, err := os.CreateTemp(filepath.Dir(prefix), filepath.Base(prefix)+ext+".*.tmp")
	if err != nil {
		return nil, err
	}
	return &spillFile{f: f, w: bufio.NewWriterSize(f, spillBufferSize)}, nil
}

func (s *spillFile) writeUint32(v uint32) error {
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], v)
	_, err := s.w.Write(b[:])
	return err
}

func (s *spillFile) writeUint64(v uint64) error {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], v)
	_, err := s.w.Write(b[:])
	return err
}

// rewind flushes what was written and positions a reader at the start.
func (s *spillFile) rewind() error {
	if err := s.w.Flush(); err != nil {
		return err
	}
	if _, err := s.f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if s.r == nil {
		s.r = bufio.NewReaderSize(s.f, spillBufferSize)
	} else {
		s.r.Reset(s.f)
	}
	return nil
}

// sync flushes, fsyncs and closes the file, leaving it in place.
func (s *spillFile) sync() error {
	err := s.w.Flush()
	if err == nil {
		err = s.f.Sync()
	}
	return errors.Join(err, s.f.Close())
}

// remove closes and deletes the file.
func (s *spillFile) remove() error {
	s.f.Close() // may already be closed by sync
	if err := os.Remove(s.f.Name()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
