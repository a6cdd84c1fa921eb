package atomicfile

import (
	"bufio"
	"fmt"
	"io"
	"io/fs"
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
	f, err := CreateTemp(dir, TempPrefix(path))
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
	if err := Commit(f, path); err != nil {
		return fmt.Errorf("atomicfile: %w", err)
	}
	if err := SyncDir(dir); err != nil {
		return fmt.Errorf("atomicfile: after renaming into %s: %w", path, err)
	}
	return nil
}

// TempPrefix returns the prefix of the temporary files Write uses for path:
// ".NAME." in path's directory, NAME being path's last element.
func TempPrefix(path string) string { return "." + filepath.Base(path) + "." }

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
