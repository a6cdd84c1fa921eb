package atomicfile

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"

	"megago/internal/filelock"
)

// Temporary files. A temporary file is named PREFIX + 8 hex digits + ".tmp" and is
// locked (package filelock) by its writer from its creation until it has been renamed
// into place or removed, so a file of that form that nobody locks was left by a writer
// that died: RemoveStale deletes those, and only those.

// CreateTemp creates a new file prefix+"XXXXXXXX.tmp" (8 random hex digits) in dir,
// with Perm under the umask (never os.CreateTemp's 0600), and locks it. Close it only
// after renaming it (Commit) or removing it, so that RemoveStale never takes it for a
// leftover.
func CreateTemp(dir, prefix string) (*os.File, error) {
	for range 100 {
		name := filepath.Join(dir, fmt.Sprintf("%s%08x.tmp", prefix, rand.Uint32()))
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, Perm)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if err := filelock.Lock(f); err != nil && !errors.Is(err, errors.ErrUnsupported) {
			f.Close()
			os.Remove(name)
			return nil, err
		}
		if !stillNamed(f, name) { // RemoveStale took it between the create and the lock
			f.Close()
			continue
		}
		return f, nil
	}
	return nil, fmt.Errorf("no unused temporary name %s* in %s", prefix, dir)
}

// stillNamed reports whether path still names the open file f.
func stillNamed(f *os.File, path string) bool {
	a, err := f.Stat()
	if err != nil {
		return false
	}
	b, err := os.Stat(path)
	return err == nil && os.SameFile(a, b)
}

// isTemp reports whether name is a temporary file name made by CreateTemp with prefix.
func isTemp(name, prefix string) bool {
	rest, ok := strings.CutPrefix(name, prefix)
	if !ok {
		return false
	}
	hex, ok := strings.CutSuffix(rest, ".tmp")
	if !ok || len(hex) != 8 {
		return false
	}
	for _, c := range hex {
		if !strings.ContainsRune("0123456789abcdef", c) {
			return false
		}
	}
	return true
}

// RemoveStale removes the temporary files of dir made by CreateTemp with prefix (Write
// uses TempPrefix(path)) that no writer holds any more: those left by a process that
// was killed or crashed. Files still being written are left alone. It returns the
// paths removed. It removes nothing where file locks are not supported
// (filelock.Supported is false), since a live file could not be told from a stale one.
func RemoveStale(dir, prefix string) ([]string, error) {
	if !filelock.Supported {
		return nil, nil
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, e := range entries {
		if !e.Type().IsRegular() || !isTemp(e.Name(), prefix) {
			continue
		}
		path := filepath.Join(dir, e.Name())
		ok, err := removeIfUnlocked(path)
		if err != nil {
			errs = append(errs, err)
		} else if ok {
			removed = append(removed, path)
		}
	}
	return removed, errors.Join(errs...)
}

// removeIfUnlocked removes path if nobody locks it, holding its lock meanwhile.
func removeIfUnlocked(path string) (bool, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	if err := filelock.TryLock(f); err != nil {
		if errors.Is(err, filelock.ErrLocked) || errors.Is(err, errors.ErrUnsupported) {
			return false, nil // in use, or cannot tell
		}
		return false, err
	}
	if !stillNamed(f, path) {
		return false, nil
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	return true, nil
}
