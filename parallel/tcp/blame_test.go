package tcp

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"megago/parallel"
	"megago/tensor"
)

// TestTCPBlameStuckRank: one rank stops taking part after a first all-reduce (its
// goroutine blocks, as if stuck in its own code); the others' next all-reduce times out,
// and every one of them names that rank, not the neighbour it was waiting on.
func TestTCPBlameStuckRank(t *testing.T) {
	const n, timeout = 4, 300 * time.Millisecond
	for _, victim := range []int{1, 3} {
		t.Run(fmt.Sprintf("rank-%d-stuck", victim), func(t *testing.T) {
			ctx := context.Background()
			done := make(chan struct{}) // the others have failed; the stuck rank may leave
			failed := make(chan struct{}, n)
			go func() {
				for range n - 1 {
					<-failed
				}
				close(done)
			}()
			err := tcpRun(t, n, func(cfg *Config) { cfg.Timeout = timeout }, func(c parallel.Comm) error {
				x := tensor.Ones(tensor.NewCPU(), tensor.F32, 1000)
				if err := c.AllReduce(ctx, x, parallel.Sum); err != nil {
					return err
				}
				if c.Rank() == victim {
					<-done
					return nil
				}
				defer func() { failed <- struct{}{} }()
				err := c.AllReduce(ctx, x, parallel.Sum)
				if err := tcpExpectPeerError(err, victim, "timed out after 300ms"); err != nil {
					return err
				}
				// The chain of waits ends at the stuck rank, or (when another rank timed
				// out first, as on a loaded machine) at a rank that has given up blaming it.
				if a, b := fmt.Sprintf("; rank %d is in no call", victim), fmt.Sprintf("blaming rank %d:", victim); !strings.Contains(err.Error(), a) && !strings.Contains(err.Error(), b) {
					return fmt.Errorf("error %q mentions neither %q nor %q", err, a, b)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestTCPBlameCycle: two ranks that each wait to receive from the other both time out,
// and the error says that they wait for one another.
func TestTCPBlameCycle(t *testing.T) {
	const timeout = 300 * time.Millisecond
	err := tcpRun(t, 2, func(cfg *Config) { cfg.Timeout = timeout }, func(c parallel.Comm) error {
		x := tensor.Zeros(tensor.NewCPU(), tensor.F32, 4)
		err := c.Recv(context.Background(), x, 1-c.Rank())
		var pe *parallel.Error
		if !errors.As(err, &pe) || !strings.Contains(err.Error(), "waits for this rank in recv: the ranks wait for one another") {
			return fmt.Errorf("got %v, want an error saying that the ranks wait for one another", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
