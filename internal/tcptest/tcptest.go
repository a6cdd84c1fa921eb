package tcptest

import (
	"bytes"
	"context"
	"encoding/gob"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"megago/internal/launch"
	"megago/parallel"
	"megago/parallel/tcp"
)

// TCPWorker is the body of a test that runs only as one rank of a job RunTCPWorkers
// starts (it skips otherwise, so `go test` alone passes over it): it joins the TCP job the
// environment describes, calls fn with the world and the job's directory (shared with
// the test that started it), writes fn's result (gob-encoded) where
// RunTCPWorkers reads it, and leaves with a barrier, so no rank closes its connections
// while a peer still reads. env names the variable that carries the job's directory.
func TCPWorker(t *testing.T, env string, fn func(ctx context.Context, world parallel.Comm, dir string) (any, error)) {
	t.Helper()
	dir := os.Getenv(env)
	if dir == "" {
		t.Skip("runs only as a worker process started by its test (" + env + " unset)")
	}
	cfg, err := tcp.ConfigFromEnv(os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	world, err := tcp.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer world.(io.Closer).Close()
	out, err := fn(ctx, world, dir)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(out); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("rank-%d.gob", world.Rank())), buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := world.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
}

// RunTCPWorkers starts n processes of this test binary with megago's launcher (as
// `megago launch -n N` does), each running only the test named worker (which calls
// TCPWorker with the same env), and returns the job's directory and each rank's
// gob-encoded result, in rank order. It fails the test, showing the workers' output, if
// one fails.
func RunTCPWorkers(t *testing.T, n int, env, worker string) (dir string, results [][]byte) {
	t.Helper()
	dir = t.TempDir()
	var log bytes.Buffer
	cfg := launch.Config{N: n, Grace: 5 * time.Second, ExtraEnv: []string{env + "=" + dir, "MEGAGO_TIMEOUT=60s"}}
	if err := launch.Run(context.Background(), cfg, os.Args[0], []string{"-test.run=^" + worker + "$"}, &log, &log); err != nil {
		t.Fatalf("workers: %v\n%s", err, log.String())
	}
	results = make([][]byte, n)
	for r := range n {
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("rank-%d.gob", r)))
		if err != nil {
			t.Fatalf("rank %d wrote no result: %v\n%s", r, err, log.String())
		}
		results[r] = b
	}
	return dir, results
}

// DecodeGob decodes gob data b into v, failing the test if it cannot.
func DecodeGob(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := gob.NewDecoder(bytes.NewReader(b)).Decode(v); err != nil {
		t.Fatal(err)
	}
}
