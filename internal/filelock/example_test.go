package filelock_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"megago/internal/filelock"
)

// A second Acquire of a held lock file is refused with the holder's process id.
func ExampleAcquire() {
	dir, _ := os.MkdirTemp("", "filelock")
	defer os.RemoveAll(dir)
	l, err := filelock.Acquire(filepath.Join(dir, "save.lock"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer l.Release()
	_, err = filelock.Acquire(filepath.Join(dir, "save.lock"))
	var held *filelock.HeldError
	fmt.Println(errors.As(err, &held) && held.PID == os.Getpid() || !filelock.Supported)
	// Output: true
}
