package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// crashLayout is small: two TP ranks, two DP ranks with the distributed optimizer.
var crashLayout = layout{tp: 2, pp: 1, dp: 2, distributed: true}

// saveIterations trains from iteration 0 and saves after each iteration in saves,
// crashing (hook) during the last save if hook is set. It returns the parameters at the
// first save.
func saveIterations(t *testing.T, dir string, saves []int, hook saveHook) (map[string][]float64, error) {
	t.Helper()
	var mu sync.Mutex
	first := map[string][]float64{}
	err := tryLayout(crashLayout, func(ctx context.Context, r *rig) error {
		it := 0
		for i, s := range saves {
			for ; it < s; it++ {
				if _, err := r.step(ctx, it); err != nil {
					return err
				}
			}
			var h saveHook
			if i == len(saves)-1 {
				h = hook
			}
			p, err := startSave(ctx, dir, r.mesh, r.st, false, h)
			if err == nil {
				err = p.Commit(ctx)
			}
			if err != nil {
				return err
			}
			if i == 0 {
				r.params(first, &mu)
			}
		}
		return nil
	})
	return first, err
}

// loadParams loads the latest checkpoint of dir into a fresh rig and returns its
// parameters and iteration.
func loadParams(t *testing.T, dir string) (map[string][]float64, int) {
	t.Helper()
	var mu sync.Mutex
	got := map[string][]float64{}
	it := -1
	runLayout(t, crashLayout, func(ctx context.Context, r *rig) error {
		m, err := Load(ctx, dir, r.mesh, r.st, LoadOptions{})
		if err != nil {
			return err
		}
		r.params(got, &mu)
		mu.Lock()
		it = m.Iteration
		mu.Unlock()
		return nil
	})
	return got, it
}

func sameParams(t *testing.T, what string, got, want map[string][]float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d parameters, want %d", what, len(got), len(want))
	}
	for name, w := range want {
		if d := maxRelDiff(got[name], w); d != 0 {
			t.Errorf("%s: %s differs by %g", what, name, d)
		}
	}
}

// A rank that dies at any point of a save (a panic in a goroutine rank, which aborts the
// others' collectives) leaves the previous checkpoint as the latest, loadable with its
// values; the next save succeeds over the debris.
func TestCrashDuringSave(t *testing.T) {
	for _, tc := range []struct {
		rank  int
		point string
	}{
		{0, "staged"}, {1, "writing"}, {3, "writing"}, {2, "written"}, {0, "manifest"}, {0, "renamed"},
	} {
		t.Run(fmt.Sprintf("rank%d-%s", tc.rank, tc.point), func(t *testing.T) {
			dir := t.TempDir()
			crash := func(rank int, point string) {
				if rank == tc.rank && point == tc.point {
					panic("crash at " + point)
				}
			}
			first, err := saveIterations(t, dir, []int{1, 2}, crash)
			if err == nil {
				t.Fatalf("the crash at %s on rank %d went unnoticed", tc.point, tc.rank)
			}
			if it, err := LatestIteration(dir); err != nil || it != 1 {
				t.Fatalf("latest iteration %d (%v) after a crashed save, want 1", it, err)
			}
			got, it := loadParams(t, dir)
			if it != 1 {
				t.Errorf("loaded iteration %d, want 1", it)
			}
			sameParams(t, "after the crash", got, first)
			if _, err := saveIterations(t, dir, []int{2}, nil); err != nil {
				t.Fatal(err)
			}
			if _, it := loadParams(t, dir); it != 2 {
				t.Errorf("after saving again, loaded iteration %d, want 2", it)
			}
		})
	}
}

// crashEnv makes TestCrashProcessHelper save and kill its own process in the middle of
// writing a file.
const crashEnv = "MEGAGO_CHECKPOINT_CRASH_DIR"

// TestCrashProcessHelper is run as a child process by TestKilledProcess; alone it does
// nothing.
func TestCrashProcessHelper(t *testing.T) {
	dir := os.Getenv(crashEnv)
	if dir == "" {
		t.Skip("run by TestKilledProcess")
	}
	kill := func(rank int, point string) {
		if rank == 1 && point == "writing" {
			p, _ := os.FindProcess(os.Getpid())
			_ = p.Kill() // SIGKILL: no deferred cleanup, like a lost node
			select {}
		}
	}
	_, err := saveIterations(t, dir, []int{1, 2}, kill)
	t.Fatalf("the process survived its kill: %v", err)
}

// Killing the process (SIGKILL) in the middle of writing a shard file leaves the
// previous checkpoint as the latest and loadable.
func TestKilledProcess(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashProcessHelper$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashEnv+"="+dir)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Success() {
		t.Fatalf("helper process: %v\n%s", err, out)
	}
	if it, err := LatestIteration(dir); err != nil || it != 1 {
		t.Fatalf("latest iteration %d (%v) after the kill, want 1\n%s", it, err, out)
	}
	staging := filepath.Join(dir, IterDir(2)+stagingSuffix)
	if _, err := os.Stat(staging); err != nil {
		t.Errorf("the killed save left no staging directory %s (did it get that far?): %v", staging, err)
	}
	if _, it := loadParams(t, dir); it != 1 {
		t.Errorf("loaded iteration %d, want 1", it)
	}
	// The kernel released the dead process's lock: the next save proceeds, and removes
	// the staging directory the killed one left.
	if _, err := saveIterations(t, dir, []int{3}, nil); err != nil {
		t.Fatalf("saving after the kill: %v", err)
	}
	if _, err := os.Stat(staging); !os.IsNotExist(err) {
		t.Errorf("the staging directory of the killed save is still there (%v)", err)
	}
}

// An asynchronous save holds the state of the moment StartSave was called while
// training goes on, and publishes it at Commit.
func TestAsyncSave(t *testing.T) {
	dir := t.TempDir()
	var mu sync.Mutex
	want := map[string][]float64{}
	runLayout(t, crashLayout, func(ctx context.Context, r *rig) error {
		if _, err := r.step(ctx, 0); err != nil {
			return err
		}
		r.params(want, &mu)
		p, err := StartSave(ctx, dir, r.mesh, r.st)
		if err != nil {
			return err
		}
		if _, err := r.step(ctx, 1); err != nil { // changes the parameters while the files are written
			return err
		}
		if _, err := LatestIteration(dir); err == nil {
			t.Errorf("an uncommitted save is already the latest")
		}
		return p.Commit(ctx)
	})
	got, it := loadParams(t, dir)
	if it != 1 {
		t.Errorf("loaded iteration %d, want 1", it)
	}
	sameParams(t, "after an asynchronous save", got, want)
}
