//go:build unix

package filelock

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Supported reports whether this platform has file locks.
const Supported = true

// TryLock takes an exclusive lock on f without waiting. It returns an error matching
// ErrLocked when another open file holds it, and one matching errors.ErrUnsupported when
// the file system cannot lock.
func TryLock(f *os.File) error {
	return flock(f, unix.LOCK_EX|unix.LOCK_NB)
}

// Lock takes an exclusive lock on f, waiting for it.
func Lock(f *os.File) error {
	return flock(f, unix.LOCK_EX)
}

func flock(f *os.File, how int) error {
	for {
		err := unix.Flock(int(f.Fd()), how)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EWOULDBLOCK):
			return fmt.Errorf("%s: %w", f.Name(), ErrLocked)
		case errors.Is(err, unix.ENOTSUP), errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.ENOLCK), errors.Is(err, unix.EINVAL):
			return fmt.Errorf("locking %s: %w (%w)", f.Name(), errors.ErrUnsupported, err)
		default:
			return fmt.Errorf("locking %s: %w", f.Name(), err)
		}
	}
}
