//go:build !unix

package atomicfile

import (
	"fmt"
	"os"
)

// Commit closes the temporary file f (from CreateTemp; synced by the caller) and renames
// it to path (an open file cannot be renamed on every platform). On error the file is
// left under its temporary name for the caller to remove.
func Commit(f *os.File, path string) error {
	if err := f.Close(); err != nil {
		return fmt.Errorf("closing %s: %w", f.Name(), err)
	}
	return os.Rename(f.Name(), path)
}
