//go:build unix

package tcp

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"megago/parallel"
)

// stopVictim is the rank the stop test stops. In a ring of four, rank 3 waits for it
// directly, ranks 0 and 1 only through their neighbours.
const stopVictim = 2

// stopWait bounds the stop test: the stopped rank is killed after that at the latest.
const stopWait = 20 * time.Second

// workerStop: rank stopVictim stops its own process (SIGSTOP) in the middle of a series
// of all-reduces, after leaving its pid in dir; every other rank writes to dir how its
// all-reduce failed and after how long.
func workerStop(t *testing.T, c parallel.Comm, dir string) {
	elapsed, err := allReduceUntilFailure(t, c, 1<<10, stopVictim, func() {
		if err := os.WriteFile(filepath.Join(dir, "pid"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
			t.Fatal(err)
		}
		syscall.Kill(os.Getpid(), syscall.SIGSTOP)
		time.Sleep(stopWait) // the stop reaches every thread soon, the test then kills it
	})
	peer := -2 // not a *parallel.Error
	if pe := (*parallel.Error)(nil); errors.As(err, &pe) {
		peer = pe.Peer
	}
	res := fmt.Sprintf("%d %d\n%v", peer, elapsed.Milliseconds(), err)
	name := filepath.Join(dir, fmt.Sprintf("rank-%d", c.Rank()))
	if err := os.WriteFile(name+".tmp", []byte(res), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(name+".tmp", name); err != nil { // the test reads it whole or not at all
		t.Fatal(err)
	}
}

// TestTCPStoppedProcess: one process of four is stopped (SIGSTOP) in the middle of a
// series of all-reduces, so that it neither answers nor exits. Each of the other three
// fails within a bound with an error naming it, though two of them do not wait for it
// directly.
func TestTCPStoppedProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	const n = 4
	dir := t.TempDir()
	results := make(chan map[int]string, 1)
	go func() { results <- awaitStopResults(dir, n, stopWait) }()
	out, _ := launchWorkers(t, n, "stop", 0, workerDirEnv+"="+dir)
	got := <-results
	limit := workerTimeout + 3*probeWait // the timeout, then probes and aborts
	for r := range n {
		if r == stopVictim {
			continue
		}
		var peer, ms int
		_, err := fmt.Sscanf(got[r], "%d %d", &peer, &ms)
		switch {
		case err != nil:
			t.Errorf("rank %d reported %q", r, got[r])
		case peer != stopVictim || !strings.Contains(got[r], "; rank 2 does not answer"):
			t.Errorf("rank %d blames peer %d, want %d: %s", r, peer, stopVictim, got[r])
		case time.Duration(ms)*time.Millisecond > limit:
			t.Errorf("rank %d failed after %d ms, more than %v", r, ms, limit)
		}
	}
	if t.Failed() {
		t.Logf("output:\n%s", out)
	}
}

// awaitStopResults waits, at most wait, for every rank but stopVictim to leave its
// result in dir, then kills the stopped rank (whose pid is in dir) so that the job ends,
// and returns the results by rank.
func awaitStopResults(dir string, n int, wait time.Duration) map[int]string {
	got := map[int]string{}
	for deadline := time.Now().Add(wait); len(got) < n-1 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		for r := range n {
			if b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("rank-%d", r))); err == nil && r != stopVictim {
				got[r] = string(b)
			}
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "pid")); err == nil {
		if pid, err := strconv.Atoi(string(b)); err == nil {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	return got
}
