package filelock

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// ErrLocked is returned (wrapped) by TryLock when another open file holds the lock.
var ErrLocked = errors.New("file is locked")

// HeldError reports a lock file that another holder has: its path and, when the holder
// recorded it, its process id.
type HeldError struct {
	Path string
	PID  int // 0 when unknown
}

// Error returns "PATH is locked by process PID" (or "by another process").
func (e *HeldError) Error() string {
	if e.PID > 0 {
		return fmt.Sprintf("%s is locked by process %d", e.Path, e.PID)
	}
	return e.Path + " is locked by another process"
}

// Unwrap returns ErrLocked.
func (e *HeldError) Unwrap() error { return ErrLocked }

// File is a held lock file (see Acquire).
type File struct{ f *os.File }

// Acquire opens the lock file path (creating it with permission 0644 under the umask)
// and takes its lock without waiting. It then writes this process's id into the file.
// When another open file holds the lock it returns a *HeldError naming path and the
// process id the holder wrote. The file itself stays after Release: deleting a lock file
// would let two openers lock two different files.
func Acquire(path string) (*File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := TryLock(f); err != nil {
		defer f.Close()
		if errors.Is(err, ErrLocked) {
			return nil, &HeldError{Path: path, PID: readPID(f)}
		}
		if !errors.Is(err, errors.ErrUnsupported) {
			return nil, fmt.Errorf("locking %s: %w", path, err)
		}
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0) // best effort: only for messages
	}
	return &File{f: f}, nil
}

// readPID returns the process id recorded in a lock file, or 0.
func readPID(f *os.File) int {
	var b [32]byte
	n, _ := f.ReadAt(b[:], 0)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b[:n])))
	if err != nil {
		return 0
	}
	return pid
}

// Release drops the lock. It is safe to call on a nil *File and more than once.
func (l *File) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close() // closing the file releases its flock
	l.f = nil
	return err
}
