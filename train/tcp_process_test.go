package train

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

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"megago/internal/launch"
	"megago/nn"
	"megago/parallel"
)

// The 3-D test with real processes: the test binary, started 4 times by megago's launcher
// (as `megago launch -n 4` does), trains the tiny GPT at TP=2 × PP=2 over TCP and writes
// each rank's outcome to a file; the test compares them with the same layout run by
// goroutine ranks and with one rank.

const trainWorkerEnv = "MEGAGO_TRAIN_WORKER" // the directory workers write their outcomes to

// tcpLayout is the layout the process test trains: interleaved over 2 stages, sequence
// parallel, with a tied embedding (so the embedding group talks over TCP too).
var tcpLayout = layout{tp: 2, pp: 2, dp: 1, interleaved: true, sp: true, tied: true, rec: nn.RecomputeFull}

const tcpSteps = 5

// TestTrainTCPWorker is one rank of TestGPT3DOverTCP; it runs only when started by it.
func TestTrainTCPWorker(t *testing.T) {
	dir := os.Getenv(trainWorkerEnv)
	if dir == "" {
		t.Skip("runs only as a worker process of TestGPT3DOverTCP")
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
	out, err := trainRank(ctx, world, tcpLayout, tcpSteps)
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
	// Leave together, so no rank closes its connections while a peer still reads.
	if err := world.Barrier(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestGPT3DOverTCP(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	const n = 4
	dir := t.TempDir()
	var log bytes.Buffer
	cfg := launch.Config{N: n, Grace: 5 * time.Second, ExtraEnv: []string{trainWorkerEnv + "=" + dir, "MEGAGO_TIMEOUT=60s"}}
	if err := launch.Run(context.Background(), cfg, os.Args[0], []string{"-test.run=^TestTrainTCPWorker$"}, &log, &log); err != nil {
		t.Fatalf("workers: %v\n%s", err, log.String())
	}
	got := newOutcome(tcpSteps)
	for r := range n {
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("rank-%d.gob", r)))
		if err != nil {
			t.Fatalf("rank %d wrote no outcome: %v\n%s", r, err, log.String())
		}
		var o outcome
		if err := gob.NewDecoder(bytes.NewReader(b)).Decode(&o); err != nil {
			t.Fatal(err)
		}
		got.merge(o)
	}
	// The TCP ring and the in-process transport may sum in different orders (a ring of
	// two ranks adds the same two numbers, so here they agree); compare within tolerance.
	local := train3D(t, tcpLayout, tcpSteps)
	assert.InDeltaSlice(t, local.Loss, got.Loss, matrixTol, "step losses")
	require.Len(t, got.Params, len(local.Params))
	for k, w := range local.Params {
		assert.InDeltaSlice(t, w, got.Params[k], matrixTol, "parameter %s", k)
	}
	ref := train3D(t, layout{tp: 1, pp: 1, dp: 1, tied: true}, tcpSteps)
	compareTol(t, ref, got, tcpLayout.tp)
}
