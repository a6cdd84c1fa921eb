package atomicfile

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
)

// Perm is the permission a written file is created with, before the umask.
const Perm fs.FileMode = 0o644

// WriteFile writes data to path atomically (see the package doc). The directory must
// exist.
func WriteFile(path string, data []byte) error {
	return Write(path, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// Write writes to path atomically what write writes to w, a buffered writer over the
// temporary file. An error from write is returned unchanged (wrapped errors stay
// matchable with errors.Is); others say which path was being written.
func Write(path string, write func(w io.Writer) error) (err error) {
	dir := filepath.Dir(path)
	f, err := createTemp(dir, filepath.Base(path))
	if err != nil {
		return fmt.Errorf("atomicfile: writing %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	bw := bufio.NewWriterSize(f, 1<<16)
	if err := write(bw); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("atomicfile: writing %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("atomicfile: fsync of %s: %w", f.Name(), err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("atomicfile: closing %s: %w", f.Name(), err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("atomicfile: %w", err)
	}
	if err := SyncDir(dir); err != nil {
		return fmt.Errorf("atomicfile: after renaming into %s: %w", path, err)
	}
	return nil
}

// createTemp creates a new file ".name.<random>.tmp" in dir with Perm under the umask.
func createTemp(dir, name string) (*os.File, error) {
	for range 100 {
		tmp := filepath.Join(dir, fmt.Sprintf(".%s.%08x.tmp", name, rand.Uint32()))
		f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, Perm)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		return f, err
	}
	return nil, fmt.Errorf("no unused temporary name for %s in %s", name, dir)
}

// SyncDir fsyncs a directory, making the creations, renames and removals in it durable.
func SyncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
