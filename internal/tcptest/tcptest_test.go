package tcptest

import (
	"context"
	"testing"

	"megago/parallel"
	"megago/tensor"
)

const sumEnv = "MEGAGO_TCPTEST_WORKER"

// TestSumWorker is one rank of TestRunTCPWorkers; it runs only when started by it.
func TestSumWorker(t *testing.T) {
	TCPWorker(t, sumEnv, func(ctx context.Context, world parallel.Comm, _ string) (any, error) {
		v := tensor.Scalar(tensor.NewCPU(), tensor.F64, float64(world.Rank()+1))
		if err := world.AllReduce(ctx, v, parallel.Sum); err != nil {
			return nil, err
		}
		return []float64{float64(world.Rank()), v.Item()}, nil
	})
}

// Three processes all-reduce rank+1: every rank reports its own rank and 1+2+3 = 6.
func TestRunTCPWorkers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	_, results := RunTCPWorkers(t, 3, sumEnv, "TestSumWorker")
	for r, b := range results {
		var got []float64
		DecodeGob(t, b, &got)
		if len(got) != 2 || got[0] != float64(r) || got[1] != 6 {
			t.Errorf("rank %d reported %v, want [%d 6]", r, got, r)
		}
	}
}
