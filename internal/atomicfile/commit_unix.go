//go:build unix

package atomicfile

import (
	"fmt"
	"os"
)

// Commit renames the temporary file f (from CreateTemp; synced by the caller) to path
// and closes it. On Unix the file is closed after the rename, so it stays locked until
// it has its final name. On error f is closed and left under its temporary name for the
// caller to remove.
func Commit(f *os.File, path string) error {
	if err := os.Rename(f.Name(), path); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("closing %s: %w", path, err)
	}
	return nil
}
