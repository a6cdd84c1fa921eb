package filelock_test

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"megago/internal/filelock"
)

func TestAcquireRefusesASecondHolderAndNamesThePID(t *testing.T) {
	if !filelock.Supported {
		t.Skip("needs flock (a Unix system)")
	}
	path := filepath.Join(t.TempDir(), "lock")
	first, err := filelock.Acquire(path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = filelock.Acquire(path) // another open file, even in this process
	var held *filelock.HeldError
	if !errors.As(err, &held) || !errors.Is(err, filelock.ErrLocked) {
		t.Fatalf("second Acquire: %v, want a HeldError", err)
	}
	want := path + " is locked by process " + strconv.Itoa(os.Getpid())
	if err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	if err := first.Release(); err != nil {
		t.Fatal(err)
	}
	second, err := filelock.Acquire(path)
	if err != nil {
		t.Fatalf("Acquire after Release: %v", err)
	}
	second.Release()
	second.Release() // a second Release is harmless
}

func TestTryLockAndClose(t *testing.T) {
	if !filelock.Supported {
		t.Skip("needs flock (a Unix system)")
	}
	path := filepath.Join(t.TempDir(), "f")
	a, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := filelock.TryLock(a); err != nil {
		t.Fatal(err)
	}
	b, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := filelock.TryLock(b); !errors.Is(err, filelock.ErrLocked) {
		t.Fatalf("TryLock while held: %v, want ErrLocked", err)
	}
	a.Close() // the kernel drops the lock with the file, as when a holder dies
	if err := filelock.TryLock(b); err != nil {
		t.Fatalf("TryLock after the holder closed: %v", err)
	}
}
