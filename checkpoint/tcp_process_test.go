package checkpoint

import (
	"bytes"
	"context"
	"encoding/gob"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"megago/internal/launch"
	"megago/parallel"
)

// Saving from real processes: the test binary, started 4 times by megago's launcher,
// trains the harness GPT at TP=2 × DP=2 with the distributed optimizer over TCP, saves,
// and writes its parameters to a file; the checkpoint then loads, in this process, into
// exactly those parameters.

const saveWorkerEnv = "MEGAGO_CHECKPOINT_WORKER" // the directory workers save into

var tcpLayout = crashLayout

// TestSaveTCPWorker is one rank of TestSaveOverTCP; it runs only when started by it.
func TestSaveTCPWorker(t *testing.T) {
	dir := os.Getenv(saveWorkerEnv)
	if dir == "" {
		t.Skip("runs only as a worker process of TestSaveOverTCP")
	}
	cfg, err := parallel.ConfigFromEnv(os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	world, err := parallel.NewTCP(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer world.(io.Closer).Close()
	r, err := newRig(ctx, world, tcpLayout)
	if err != nil {
		t.Fatal(err)
	}
	for it := range 2 {
		if _, err := r.step(ctx, it); err != nil {
			t.Fatal(err)
		}
	}
	if err := Save(ctx, filepath.Join(dir, "ckpt"), r.mesh, r.st); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	vals := map[string][]float64{}
	r.params(vals, &mu)
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(vals); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("rank-%d.gob", world.Rank())), buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := world.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestSaveOverTCP(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	const n = 4
	dir := t.TempDir()
	var log bytes.Buffer
	cfg := launch.Config{N: n, Grace: 5 * time.Second, ExtraEnv: []string{saveWorkerEnv + "=" + dir, "MEGAGO_TIMEOUT=60s"}}
	if err := launch.Run(context.Background(), cfg, os.Args[0], []string{"-test.run=^TestSaveTCPWorker$"}, &log, &log); err != nil {
		t.Fatalf("workers: %v\n%s", err, log.String())
	}
	want := map[string][]float64{}
	for r := range n {
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("rank-%d.gob", r)))
		if err != nil {
			t.Fatalf("rank %d wrote no parameters: %v\n%s", r, err, log.String())
		}
		var vals map[string][]float64
		if err := gob.NewDecoder(bytes.NewReader(b)).Decode(&vals); err != nil {
			t.Fatal(err)
		}
		for k, v := range vals {
			if w, ok := want[k]; ok { // TP ranks hold different parts: merge the nonzero
				for i := range w {
					if v[i] != 0 {
						w[i] = v[i]
					}
				}
				continue
			}
			want[k] = v
		}
	}
	got, it := loadParams(t, filepath.Join(dir, "ckpt"))
	if it != 2 {
		t.Errorf("loaded iteration %d, want 2", it)
	}
	sameParams(t, "saved over TCP", got, want)
}
