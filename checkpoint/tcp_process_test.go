package checkpoint

import (
	"context"
	"path/filepath"
	"sync"
	"testing"

	"megago/internal/tcptest"
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
	tcptest.TCPWorker(t, saveWorkerEnv, func(ctx context.Context, world parallel.Comm, dir string) (any, error) {
		r, err := newRig(ctx, world, tcpLayout)
		if err != nil {
			return nil, err
		}
		for it := range 2 {
			if _, err := r.step(ctx, it); err != nil {
				return nil, err
			}
		}
		if err := Save(ctx, filepath.Join(dir, "ckpt"), r.mesh, r.st); err != nil {
			return nil, err
		}
		var mu sync.Mutex
		vals := map[string][]float64{}
		r.params(vals, &mu)
		return vals, nil
	})
}

func TestSaveOverTCP(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	const n = 4
	dir, results := tcptest.RunTCPWorkers(t, n, saveWorkerEnv, "TestSaveTCPWorker")
	want := map[string][]float64{}
	for _, b := range results {
		var vals map[string][]float64
		tcptest.DecodeGob(t, b, &vals)
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
