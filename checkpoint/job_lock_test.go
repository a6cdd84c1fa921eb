package checkpoint

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"megago/internal/filelock"
)

// A second LockDir of a held directory is refused with the directory and the holder's
// process id; saves go on while the job lock is held; after unlock it can be taken again.
func TestLockDir(t *testing.T) {
	if !filelock.Supported {
		t.Skip("needs flock (a Unix system)")
	}
	dir := filepath.Join(t.TempDir(), "ck")
	unlock, err := LockDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = LockDir(dir)
	want := "checkpoint: another job saves to " + dir + ": " + filepath.Join(dir, JobLockFile) +
		" is locked by process " + strconv.Itoa(os.Getpid())
	if err == nil || err.Error() != want {
		t.Fatalf("second LockDir: %v\nwant %s", err, want)
	}
	if _, err := saveIterations(t, dir, []int{1}, nil); err != nil {
		t.Fatalf("a save by the job holding the directory: %v", err)
	}
	if err := unlock(); err != nil {
		t.Fatal(err)
	}
	again, err := LockDir(dir)
	if err != nil {
		t.Fatalf("LockDir after unlock: %v", err)
	}
	again()
}
