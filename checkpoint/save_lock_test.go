package checkpoint

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"megago/internal/filelock"
)

// stagingDirs returns the staging directories in dir.
func stagingDirs(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "iter_*"+stagingSuffix))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// A save is refused while another job holds the directory's lock, naming the directory
// and the holder's process id; a save removes the staging directories and temporary
// files interrupted saves left, and a failed save removes its own.
func TestSaveLockAndLitter(t *testing.T) {
	if !filelock.Supported {
		t.Skip("needs flock (a Unix system)")
	}
	dir := t.TempDir()
	debris := []string{filepath.Join(dir, IterDir(3)+stagingSuffix), filepath.Join(dir, "."+TrackerFile+".0badc0de.tmp")}
	if err := os.MkdirAll(filepath.Join(debris[0], "model_tp00_pp000.safetensors"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(debris[1], []byte("3"), 0o644); err != nil {
		t.Fatal(err)
	}

	other, err := filelock.Acquire(filepath.Join(dir, LockFile)) // another job's save
	if err != nil {
		t.Fatal(err)
	}
	_, err = saveIterations(t, dir, []int{1}, nil)
	want := "checkpoint: saving iteration 1: another save to " + dir + " is under way: " +
		filepath.Join(dir, LockFile) + " is locked by process " + strconv.Itoa(os.Getpid())
	if err == nil || !strings.HasPrefix(err.Error(), "rank 0: "+want+"\n") { // rank 0's error first, then the others'
		t.Fatalf("saving while another job saves: %v\nwant rank 0: %s", err, want)
	}
	for _, p := range debris {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("a refused save removed %s: %v", p, err)
		}
	}
	other.Release()

	if _, err := saveIterations(t, dir, []int{1}, nil); err != nil {
		t.Fatal(err)
	}
	for _, p := range debris {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s left by an interrupted save is still there (%v)", p, err)
		}
	}

	full := func(rank int, point string) { // a write error on rank 1, as a full disk gives
		if rank == 1 && point == "writing" {
			panic("no space left on device")
		}
	}
	if _, err := saveIterations(t, dir, []int{2}, full); err == nil {
		t.Fatal("a save whose writes failed succeeded")
	}
	if s := stagingDirs(t, dir); len(s) != 0 {
		t.Errorf("a failed save left %v", s)
	}
	if it, err := LatestIteration(dir); err != nil || it != 1 {
		t.Errorf("latest iteration %d (%v), want 1", it, err)
	}
	l, err := filelock.Acquire(filepath.Join(dir, LockFile))
	if err != nil {
		t.Fatalf("the lock is still held after the saves: %v", err)
	}
	l.Release()
}
