package tcp

import (
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"megago/parallel"
)

// TestTCPRendezvousFlood: more connections than rank 0 checks at once, all silent, reach
// its port before the job's ranks; the ranks are told to come back, retry, and the job
// forms and works well within its timeout.
func TestTCPRendezvousFlood(t *testing.T) {
	const n = 3
	const idle = maxPendingHandshakes + 44 // more than rank 0 checks at once
	port := freePort(t)
	var log tcpLog
	cfgFor := func(r int) Config { return log.config(r, n, port) }
	start := time.Now()
	comms := make([]parallel.Comm, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	wg.Go(func() { comms[0], errs[0] = New(context.Background(), cfgFor(0)) })
	var flood []net.Conn
	defer func() {
		for _, nc := range flood {
			nc.Close()
		}
	}()
	for range idle {
		nc, err := strayDial(port)
		if err != nil {
			t.Fatalf("flood connection %d: %v", len(flood), err)
		}
		flood = append(flood, nc)
	}
	for r := 1; r < n; r++ {
		wg.Go(func() { comms[r], errs[r] = New(context.Background(), cfgFor(r)) })
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	if t.Failed() {
		return
	}
	tcpCheckJob(t, comms, "after the flood")
	// A handshake timeout until the silent connections are dropped, then the joiners'
	// backoff (at most 500 ms) and the job's own work.
	if d, limit := time.Since(start), tcpTestHandshake+2*time.Second; d > limit {
		t.Errorf("the job took %v to form and all-reduce, more than %v", d, limit)
	}
	if logged := strings.Join(log.lines(), "\n"); !strings.Contains(logged, "refused connection from 127.0.0.1") || !strings.Contains(logged, "busy") {
		t.Errorf("rank 0 told no connection it was busy; it logged:\n%s", logged)
	}
}

// TestTCPWorldSizeMismatch: a rank started with another WORLD_SIZE than the job's is
// refused at once, told both sizes; rank 0 and the rank that has already joined fail
// soon after with the same reason, instead of waiting for the job's timeout.
func TestTCPWorldSizeMismatch(t *testing.T) {
	const n, bad = 3, 2
	port := freePort(t)
	errs := make([]error, n)
	took := make([]time.Duration, n)
	var wg sync.WaitGroup
	join := func(r, world int) {
		wg.Go(func() {
			cfg := tcpConfig(r, world, port)
			start := time.Now()
			c, err := New(context.Background(), cfg)
			took[r], errs[r] = time.Since(start), err
			if c != nil {
				c.(io.Closer).Close()
			}
		})
	}
	join(0, n)
	join(1, n)
	join(bad, n+1)
	wg.Wait()
	const reason = "world size 4 differs from the job's 3"
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), reason) {
			t.Errorf("rank %d: got %v, want an error saying %q", r, err, reason)
		}
		if took[r] > tcpTestTimeout/2 {
			t.Errorf("rank %d failed after %v, want well within the timeout %v", r, took[r], tcpTestTimeout)
		}
	}
	if err := errs[bad]; err != nil && !strings.Contains(err.Error(), "refused this rank: "+reason) {
		t.Errorf("rank %d: %v, want a refusal", bad, err)
	}
}
