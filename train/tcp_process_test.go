package train

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"megago/internal/tcptest"
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
	tcptest.TCPWorker(t, trainWorkerEnv, func(ctx context.Context, world parallel.Comm, _ string) (any, error) {
		return trainRank(ctx, world, tcpLayout, tcpSteps)
	})
}

func TestGPT3DOverTCP(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	const n = 4
	_, results := tcptest.RunTCPWorkers(t, n, trainWorkerEnv, "TestTrainTCPWorker")
	got := newOutcome(tcpSteps)
	for _, b := range results {
		var o outcome
		tcptest.DecodeGob(t, b, &o)
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
	compareTol(t, ref, got)
}
