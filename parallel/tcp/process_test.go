package tcp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"megago/internal/launch"
	"megago/parallel"
	"megago/parallel/internal/commtest"
	"megago/tensor"
)

// Tests of the TCP transport with ranks as real processes on loopback, started by
// megago's launcher: this test binary runs itself as the workers.

const (
	workerEnv     = "MEGAGO_TEST_WORKER"      // the worker's mode: suite, kill, stray or stop
	workerGateEnv = "MEGAGO_TEST_WORKER_GATE" // stray mode: ranks > 0 wait for this file
	workerDirEnv  = "MEGAGO_TEST_WORKER_DIR"  // stop mode: where ranks leave their results
	workerTimeout = 2 * time.Second           // the transport timeout of the workers
	victimExit    = 3                         // exit status of the rank the kill test kills
)

// TestTCPWorker is one rank of a process test. It runs only when started by one (with
// MEGAGO_TEST_WORKER set) and reports through its output and exit status.
func TestTCPWorker(t *testing.T) {
	mode := os.Getenv(workerEnv)
	if mode == "" {
		t.Skip("runs only as a worker process of the TCP process tests")
	}
	cfg, err := ConfigFromEnv(os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	cfg.SegmentBytes = 256
	cfg.Logf = func(format string, args ...any) { fmt.Printf("LOG "+format+"\n", args...) }
	if mode == "stray" && cfg.Rank > 0 {
		workerWaitFor(t, os.Getenv(workerGateEnv))
	}
	if mode == "kill" || mode == "stop" {
		signal.Ignore(syscall.SIGTERM) // report, even though the launcher stops the job
	}
	ctx := context.Background()
	c, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	switch mode {
	case "suite", "stray":
		if err := commtest.Suite(ctx, c, tensor.NewCPU()); err != nil {
			t.Fatal(err)
		}
		fmt.Printf("SUITE-OK rank %d\n", c.Rank())
	case "kill":
		workerKill(t, c, cfg.Timeout)
	case "stop":
		workerStop(t, c, os.Getenv(workerDirEnv))
	default:
		t.Fatalf("unknown worker mode %q", mode)
	}
}

func workerWaitFor(t *testing.T, path string) {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return
		}
	}
	t.Fatalf("%s did not appear", path)
}

// workerKill: the last rank exits while every rank loops on all-reduces; the others
// must fail within the timeout with an error naming it.
func workerKill(t *testing.T, c parallel.Comm, timeout time.Duration) {
	victim := c.Size() - 1
	elapsed, err := allReduceUntilFailure(t, c, 1<<18, victim, func() { os.Exit(victimExit) })
	var pe *parallel.Error
	ok := errors.As(err, &pe) && pe.Peer == victim && elapsed < timeout
	fmt.Printf("KILL-RESULT rank %d ok %t after %v: %v\n", c.Rank(), ok, elapsed, err)
	if !ok {
		t.Fatal("wrong error")
	}
}

// allReduceUntilFailure has every rank all-reduce numel float32s, over and over, from a
// barrier on. Rank victim does so on a goroutine and, 100 ms in, calls leave, which
// does not return (it exits or stops the process). The others return how long their
// first failed call took, and its error.
func allReduceUntilFailure(t *testing.T, c parallel.Comm, numel, victim int, leave func()) (time.Duration, error) {
	ctx := context.Background()
	if err := c.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
	x := tensor.Ones(tensor.NewCPU(), tensor.F32, numel)
	if c.Rank() == victim {
		go func() {
			for c.AllReduce(ctx, x, parallel.Sum) == nil {
			}
		}()
		time.Sleep(100 * time.Millisecond)
		leave()
		t.Fatal("the victim did not leave")
	}
	for i := 0; ; i++ {
		start := time.Now()
		if err := c.AllReduce(ctx, x, parallel.Sum); err != nil {
			return time.Since(start), err
		}
		if i > 100000 {
			t.Fatal("the all-reduces never failed")
		}
	}
}

// launchWorkers runs n workers in mode through launch.Run and returns their output.
func launchWorkers(t *testing.T, n int, mode string, port int, env ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer // launch.Run writes to it one whole line at a time, under a lock
	cfg := launch.Config{N: n, MasterPort: port, Grace: 5 * time.Second,
		ExtraEnv: append([]string{workerEnv + "=" + mode, "MEGAGO_TIMEOUT=" + workerTimeout.String()}, env...)}
	err := launch.Run(context.Background(), cfg, os.Args[0], []string{"-test.run=^TestTCPWorker$", "-test.v"}, &out, &out)
	return out.String(), err
}

func TestCollectiveSuiteTCPProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	for _, n := range []int{2, 3, 4} {
		t.Run(fmt.Sprintf("%d-ranks", n), func(t *testing.T) {
			out, err := launchWorkers(t, n, "suite", 0)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			for r := range n {
				if want := fmt.Sprintf("[rank %d] SUITE-OK rank %d\n", r, r); !strings.Contains(out, want) {
					t.Errorf("no %q in the output:\n%s", want, out)
				}
			}
		})
	}
}

// TestTCPKilledProcess: one process of four exits in the middle of a series of
// all-reduces; the other three report an error naming it, within the timeout, and the
// launcher reports its exit status.
func TestTCPKilledProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	const n, victim = 4, 3
	out, err := launchWorkers(t, n, "kill", 0)
	var ee *launch.ExitError
	var xe *exec.ExitError
	if !errors.As(err, &ee) || ee.Rank != victim || !errors.As(err, &xe) || xe.ExitCode() != victimExit {
		t.Errorf("launch.Run = %v, want rank %d's exit status %d", err, victim, victimExit)
	}
	for r := range victim {
		if want := fmt.Sprintf("[rank %d] KILL-RESULT rank %d ok true", r, r); !strings.Contains(out, want) {
			t.Errorf("no %q in the output", want)
		}
	}
	if t.Failed() {
		t.Logf("output:\n%s", out)
	}
}

// TestTCPStrayProcess: a connection with the wrong token to rank 0's port, made while
// rank 0 waits for the others, is refused and logged; the job then completes.
func TestTCPStrayProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	const n = 3
	port := freePort(t)
	gate := filepath.Join(t.TempDir(), "gate")
	strayErr := make(chan error, 1)
	go func() {
		p := encodeHello(hello{version: protocolVersion, rank: 1, world: n, segment: 256, token: []byte("not-the-token")})
		reason, err := strayRefused(port, strayFrame(header{kind: kindHello, length: uint32(len(p))}, p))
		if err == nil && reason != errWrongToken.Error() {
			err = fmt.Errorf("refused with %q", reason)
		}
		os.WriteFile(gate, nil, 0o644)
		strayErr <- err
	}()
	out, err := launchWorkers(t, n, "stray", port, workerGateEnv+"="+gate)
	if err != nil {
		t.Errorf("the job failed: %v", err)
	}
	if err := <-strayErr; err != nil {
		t.Errorf("stray connection: %v", err)
	}
	if want := "[rank 0] LOG parallel: tcp rank 0: refused connection from 127.0.0.1:"; !strings.Contains(out, want) {
		t.Errorf("rank 0 did not log the refusal")
	}
	for r := range n {
		if want := "[rank " + strconv.Itoa(r) + "] SUITE-OK"; !strings.Contains(out, want) {
			t.Errorf("rank %d did not complete the suite", r)
		}
	}
	if t.Failed() {
		t.Logf("output:\n%s", out)
	}
}
