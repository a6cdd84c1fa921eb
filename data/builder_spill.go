package data

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"

	"megago/internal/atomicfile"
)

// spillBufferSize is the write (and read) buffer of each temporary file of a builder.
const spillBufferSize = 256 << 10

// spillExts are the temporary files of a builder: the tokens, the spilled lengths and
// document indices, and the finished index.
var spillExts = []string{".bin", ".lengths", ".docs", ".idx"}

// spillFile is a temporary file beside a builder's output, written through a buffer and,
// for the spilled index arrays, read back once or twice. It is locked (see
// atomicfile.CreateTemp) until it is renamed into place or removed.
type spillFile struct {
	f *os.File
	w *bufio.Writer
	r *bufio.Reader // set by rewind
}

// newSpillFile creates "BASE.ext.XXXXXXXX.tmp" in prefix's directory, where BASE is
// prefix's last element, with permission 0644 under the umask.
func newSpillFile(prefix, ext string) (*spillFile, error) {
	f, err := atomicfile.CreateTemp(filepath.Dir(prefix), filepath.Base(prefix)+ext+".")
	if err != nil {
		return nil, err
	}
	return &spillFile{f: f, w: bufio.NewWriterSize(f, spillBufferSize)}, nil
}

// removeStaleSpills removes the temporary files that builders of prefix killed before
// finishing left behind (never those of a builder still running), and returns their
// paths.
func removeStaleSpills(prefix string) ([]string, error) {
	var removed []string
	var errs []error
	for _, ext := range spillExts {
		r, err := atomicfile.RemoveStale(filepath.Dir(prefix), filepath.Base(prefix)+ext+".")
		removed, errs = append(removed, r...), append(errs, err)
	}
	return removed, errors.Join(errs...)
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

// sync flushes and fsyncs the file, leaving it open (and locked) for commit.
func (s *spillFile) sync() error {
	if err := s.w.Flush(); err != nil {
		return err
	}
	return s.f.Sync()
}

// commit renames the synced file to path and closes it.
func (s *spillFile) commit(path string) error {
	return atomicfile.Commit(s.f, path)
}

// remove closes and deletes the file.
func (s *spillFile) remove() error {
	s.f.Close() // may already be closed by commit
	if err := os.Remove(s.f.Name()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
