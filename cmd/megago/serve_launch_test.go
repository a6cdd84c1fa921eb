package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"megago/internal/launch"
	"megago/internal/testutil"
)

// serveChildEnv makes TestServeChild act as a process megago launch started.
const serveChildEnv = "MEGAGO_SERVE_TEST_CHILD"

// TestServeChild is not a test: it is the megago process TestServeLaunchTP2 starts
// through the launcher, running the megago command line after the test flags.
func TestServeChild(t *testing.T) {
	if os.Getenv(serveChildEnv) == "" {
		t.Skip("runs only as a process started by TestServeLaunchTP2")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := dispatch(ctx, flag.Args(), os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "megago: %v\n", err)
	}
	os.Exit(exitCode(err))
}

// servingURL matches the line megago serve prints once it listens.
var servingURL = regexp.MustCompile(`serving .* on (http://127\.0\.0\.1:[0-9]+)/\n`)

// urlWriter collects megago serve's output and sends the URL it serves on, once.
type urlWriter struct {
	mu  sync.Mutex
	buf bytes.Buffer
	url chan string // capacity 1
}

func newURLWriter() *urlWriter { return &urlWriter{url: make(chan string, 1)} }

func (w *urlWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	had := servingURL.Match(w.buf.Bytes())
	w.buf.Write(p)
	if m := servingURL.FindSubmatch(w.buf.Bytes()); m != nil && !had {
		w.url <- string(m[1])
	}
	return len(p), nil
}

func (w *urlWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// waitURL returns the URL w's server prints, or fails the test if ended (the server's
// error) comes first.
func waitURL(t *testing.T, w *urlWriter, ended <-chan error) string {
	t.Helper()
	select {
	case url := <-w.url:
		return url
	case err := <-ended:
		t.Fatalf("megago serve ended before serving: %v\n%s", err, w.String())
	case <-time.After(time.Minute):
		t.Fatalf("megago serve did not start within a minute:\n%s", w.String())
	}
	return ""
}

// serveInProcess starts megago serve with args in this process and returns its URL; it
// stops when ctx is cancelled, and ended then gives its result.
func serveInProcess(t *testing.T, ctx context.Context, args []string) (url string, ended <-chan error) {
	t.Helper()
	w, done := newURLWriter(), make(chan error, 1)
	go func() { done <- dispatch(ctx, args, w, w) }()
	return waitURL(t, w, done), done
}

// testServeArgs are the arguments of megago serve on the Megatron test checkpoint (16
// learned positions, vocabulary 50, read by the NullTokenizer as ids) at TP tp, on a
// free port.
func testServeArgs(tp string) []string {
	return []string{"serve", "--load", filepath.Join(checkpointTestdata, "megatron", "gpt2_tp2"), "--from", "megatron",
		"--tokenizer-type", "NullTokenizer", "--vocab-size", "50", "--port", "0", "--inference-max-requests", "2",
		"--tensor-model-parallel-size", tp}
}

// TestServeLaunchTP2 serves the Megatron test checkpoint, and the tiny Mixtral with two
// experts on each rank (EP 2), at TP=2 as two processes under the launcher behind megago
// launch (rank 0 the HTTP server and the engine, rank 1 following over TCP) and at TP=1
// in this process: greedy PUT /api answers are the same. SIGTERM then stops both
// processes cleanly.
func TestServeLaunchTP2(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 2 processes")
	}
	mixtral := func(tp string) []string {
		return []string{"serve", "--load", filepath.Join(checkpointTestdata, "hfmoe", "mixtral"), "--from", "hf",
			"--tokenizer-type", "NullTokenizer", "--vocab-size", "67", "--port", "0", "--inference-max-requests", "2",
			"--tensor-model-parallel-size", tp, "--expert-model-parallel-size", tp, "--expert-tensor-parallel-size", "1"}
	}
	for _, tc := range []struct {
		name string
		args func(tp string) []string
	}{{"megatron gpt2", testServeArgs}, {"mixtral EP", mixtral}} {
		t.Run(tc.name, func(t *testing.T) { serveLaunchTP2(t, tc.args) })
	}
}

// serveLaunchTP2 is TestServeLaunchTP2 for the megago serve arguments args(TP).
func serveLaunchTP2(t *testing.T, args func(tp string) []string) {
	// Prompts the NullTokenizer reads as ids; 16 learned positions in all.
	greedy := `{"prompts": ["1 2 3", "40 7", "9"], "tokens_to_generate": 8, "top_k": 1}`

	ctx, cancel := context.WithCancel(context.Background())
	url, oneEnded := serveInProcess(t, ctx, args("1"))
	code, want := put(t, url+"/api", greedy)
	cancel()
	if code != 200 {
		t.Fatalf("TP=1: PUT /api = %d %s", code, want)
	}
	if err := <-oneEnded; err != nil {
		t.Fatalf("TP=1: %v", err)
	}

	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	sigs := make(chan os.Signal, 1)
	two, twoEnded := newURLWriter(), make(chan error, 1)
	lctx, lcancel := context.WithTimeout(context.Background(), 2*time.Minute) // kills the processes if they do not stop
	defer lcancel()
	go func() {
		twoEnded <- launch.Run(lctx, launch.Config{N: 2, ExtraEnv: []string{serveChildEnv + "=1"}, Signals: sigs},
			exe, append([]string{"-test.run=^TestServeChild$"}, args("2")...), two, two)
	}()
	url = waitURL(t, two, twoEnded)
	code, got := put(t, url+"/api", greedy)
	sigs <- syscall.SIGTERM
	if code != 200 || !bytes.Equal(got, want) {
		t.Errorf("PUT /api at TP=2 as processes = %d\n%s\nTP=1:\n%s", code, got, want)
	}
	if err := <-twoEnded; err == nil || err.Error() != "interrupted by terminated" {
		t.Errorf("launch after SIGTERM: %v, want interrupted by terminated\n%s", err, two.String())
	}
	if out := two.String(); !strings.Contains(out, "TP=2 as processes") || !strings.Contains(out, "[rank 0] stopped\n") || strings.Contains(out, "[rank 1] ") {
		t.Errorf("rank 0 did not serve TP=2 as processes and stop cleanly, or rank 1 printed:\n%s", out)
	}
}

func TestServeJobSize(t *testing.T) {
	env := map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1", "MEGAGO_JOB_TOKEN": "x"}
	job, err := serveJobFromEnv(func(k string) string { return env[k] }, 2)
	if err != nil || job == nil || job.WorldSize != 2 {
		t.Errorf("a job of 2 at TP 2: %+v, %v", job, err)
	}
	var ue *usageError
	if _, err := serveJobFromEnv(func(k string) string { return env[k] }, 1); !errors.As(err, &ue) || !strings.Contains(err.Error(), "--tensor-model-parallel-size is 1") {
		t.Errorf("a job of 2 at TP 1: %v, want a usage error", err)
	}
	if job, err := serveJobFromEnv(func(string) string { return "" }, 1); job != nil || err != nil {
		t.Errorf("no launcher: %+v, %v, want no job", job, err)
	}
}

// put sends a PUT with a JSON body and returns the status and body.
func put(t *testing.T, url, body string) (int, []byte) {
	return testutil.Request(t, http.MethodPut, url, body)
}
