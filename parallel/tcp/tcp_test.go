package tcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"megago/internal/testutil"
	"megago/parallel"
	"megago/parallel/internal/commtest"
	"megago/parallel/internal/transport"
	"megago/tensor"
)

// Tests of the TCP transport with ranks as goroutines of this process, connected over
// loopback. The tests with real processes are in tcp_process_test.go.

// tcpTestTimeout is the transport timeout of these tests: long enough for a loaded
// machine, short enough that a test waiting on it stays quick.
const tcpTestTimeout = 5 * time.Second

// tcpTestHandshake is the handshake timeout of these tests: a silent connection holds a
// place in rank 0's queue that long.
const tcpTestHandshake = time.Second

// tcpTestToken is the job token of the in-process tests.
const tcpTestToken = "test-token-0123456789"

// freePort returns a loopback port that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("needs a loopback TCP port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// tcpConfig returns the configuration of rank r of n in a job at port.
func tcpConfig(r, n, port int) Config {
	return Config{Rank: r, WorldSize: n, LocalRank: r, LocalWorldSize: n, MasterAddr: "127.0.0.1",
		MasterPort: port, Token: tcpTestToken, Timeout: tcpTestTimeout, HandshakeTimeout: tcpTestHandshake,
		SegmentBytes: 256, Logf: func(string, ...any) {}}
}

// tcpRun joins n goroutine ranks with New (after tweak adjusts each one's config),
// runs fn on each, closes the comms and returns the ranks' errors, joined and prefixed
// with the rank.
func tcpRun(t testing.TB, n int, tweak func(cfg *Config), fn func(c parallel.Comm) error) error {
	t.Helper()
	port := freePort(t)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			cfg := tcpConfig(r, n, port)
			if tweak != nil {
				tweak(&cfg)
			}
			c, err := New(context.Background(), cfg)
			if err != nil {
				errs[r] = err
				return
			}
			errs[r] = fn(c)
			c.(io.Closer).Close()
		})
	}
	wg.Wait()
	var out []error
	for r, err := range errs {
		if err != nil {
			out = append(out, fmt.Errorf("rank %d: %w", r, err))
		}
	}
	return errors.Join(out...)
}

func TestCollectiveSuiteTCP(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4} {
		t.Run(fmt.Sprintf("%d-ranks", n), func(t *testing.T) {
			testutil.ForEachBackend(t, func(t *testing.T, dev *tensor.Device) {
				err := tcpRun(t, n, nil, func(c parallel.Comm) error {
					d, err := tensor.Open(dev.String())
					if err != nil {
						return err
					}
					return commtest.Suite(context.Background(), c, d)
				})
				if err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}

// TestTCPLargeAllReduce checks a multi-segment all-reduce at the default segment size.
func TestTCPLargeAllReduce(t *testing.T) {
	const n, m = 3, 3 << 20 // 12 MiB of float32 per rank
	err := tcpRun(t, n, func(cfg *Config) { cfg.SegmentBytes = 0 }, func(c parallel.Comm) error {
		dev := tensor.NewCPU()
		x := tensor.Arange(dev, tensor.F32, float64(c.Rank()), 1, m) // x[i] = r + i: sums exact below 2^24
		if err := c.AllReduce(context.Background(), x, parallel.Sum); err != nil {
			return err
		}
		got := tensor.ToSlice[float32](x)
		for _, i := range []int{0, 1, m / 3, m/3 + 1, m/2 + 7, m - 1} {
			if want := float32(n*i + 0 + 1 + 2); got[i] != want {
				return fmt.Errorf("element %d = %v, want %v", i, got[i], want)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestTCPReductionIsReproducible checks that, with values whose float32 sum depends on
// the order, every rank gets the same bits, run after run.
func TestTCPReductionIsReproducible(t *testing.T) {
	vals := []float32{1e8, 1, -1e8, 0.5}
	var first []uint32
	for run := range 3 {
		var mu sync.Mutex
		got := map[int][]float32{}
		err := tcpRun(t, 4, nil, func(c parallel.Comm) error {
			x := tensor.FromSlice(tensor.NewCPU(), []float32{vals[c.Rank()], vals[(c.Rank()+1)%4], vals[(c.Rank()+2)%4], vals[(c.Rank()+3)%4]})
			if err := c.AllReduce(context.Background(), x, parallel.Sum); err != nil {
				return err
			}
			mu.Lock()
			got[c.Rank()] = tensor.ToSlice[float32](x)
			mu.Unlock()
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		bits := fmt.Sprint(got[0])
		for r := 1; r < 4; r++ {
			if fmt.Sprint(got[r]) != bits {
				t.Fatalf("run %d: rank %d got %v, rank 0 %v", run, r, got[r], got[0])
			}
		}
		var b []uint32
		for _, v := range got[0] {
			b = append(b, math.Float32bits(v))
		}
		if first == nil {
			first = b
		} else if fmt.Sprint(b) != fmt.Sprint(first) {
			t.Fatalf("run %d gave %v, run 0 %v", run, b, first)
		}
	}
}

// tcpExpectPeerError checks that err is a *parallel.Error naming peer whose message contains
// every one of words.
func tcpExpectPeerError(err error, peer int, words ...string) error {
	var pe *parallel.Error
	if !errors.As(err, &pe) {
		return fmt.Errorf("got %v, want a *parallel.Error", err)
	}
	if pe.Peer != peer {
		return fmt.Errorf("error %q names peer %d, want %d", err, pe.Peer, peer)
	}
	for _, w := range words {
		if !strings.Contains(err.Error(), w) {
			return fmt.Errorf("error %q does not mention %q", err, w)
		}
	}
	return nil
}

// TestTCPPeerClosed: a rank that closes its connections mid-job makes every other rank's
// collective fail with an error naming it, and later calls fail at once.
func TestTCPPeerClosed(t *testing.T) {
	const n, gone = 4, 2
	ctx := context.Background()
	var joined sync.WaitGroup // every rank is up (not a Barrier: its last frames may still be in flight)
	joined.Add(n)
	err := tcpRun(t, n, nil, func(c parallel.Comm) error {
		joined.Done()
		joined.Wait()
		if c.Rank() == gone {
			return c.(io.Closer).Close()
		}
		x := tensor.Ones(tensor.NewCPU(), tensor.F32, 1<<16)
		err := c.AllReduce(ctx, x, parallel.Sum)
		if err := tcpExpectPeerError(err, gone, "all-reduce", fmt.Sprintf("peer %d", gone)); err != nil {
			return err
		}
		start := time.Now()
		err = c.Barrier(ctx)
		if err := tcpExpectPeerError(err, gone, "barrier"); err != nil {
			return err
		}
		if d := time.Since(start); d > tcpTestTimeout/2 {
			return fmt.Errorf("barrier after the failure took %v", d)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestTCPTimeout: a rank that does not join a collective makes the others fail after
// the timeout, naming it; it learns that they gave up.
func TestTCPTimeout(t *testing.T) {
	const timeout = 300 * time.Millisecond
	ctx := context.Background()
	var released = make(chan struct{})
	err := tcpRun(t, 2, func(cfg *Config) { cfg.Timeout = timeout }, func(c parallel.Comm) error {
		x := tensor.Ones(tensor.NewCPU(), tensor.F32, 100)
		if c.Rank() == 1 {
			<-released
			err := c.AllReduce(ctx, x, parallel.Sum)
			return tcpExpectPeerError(err, -1, "reported by rank 0")
		}
		defer close(released)
		err := c.AllReduce(ctx, x, parallel.Sum)
		if !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("got %v, want a deadline error", err)
		}
		return tcpExpectPeerError(err, 1, "timed out after 300ms")
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestTCPContextCancel: a cancelled context fails the call on its rank (nobody's fault)
// and the peer learns that rank gave up.
func TestTCPContextCancel(t *testing.T) {
	err := tcpRun(t, 2, nil, func(c parallel.Comm) error {
		x := tensor.Ones(tensor.NewCPU(), tensor.F32, 100)
		if c.Rank() == 0 {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			err := c.Recv(ctx, x, 1)
			if !errors.Is(err, context.Canceled) {
				return fmt.Errorf("got %v, want context.Canceled", err)
			}
			return tcpExpectPeerError(err, -1, "recv")
		}
		err := c.AllReduce(context.Background(), x, parallel.Sum)
		return tcpExpectPeerError(err, 0, "gave up", "reported by rank 0")
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestTCPMismatch: ranks calling different collectives both get an error saying so.
func TestTCPMismatch(t *testing.T) {
	ctx := context.Background()
	err := tcpRun(t, 2, nil, func(c parallel.Comm) error {
		dev := tensor.NewCPU()
		var err error
		if c.Rank() == 0 {
			err = c.AllReduce(ctx, tensor.Ones(dev, tensor.F32, 8), parallel.Sum)
		} else {
			err = c.AllGather(ctx, tensor.Zeros(dev, tensor.F32, 8), tensor.Ones(dev, tensor.F32, 4))
		}
		var pe *parallel.Error
		if !errors.As(err, &pe) || !strings.Contains(err.Error(), "mismatched collectives") {
			return fmt.Errorf("got %v, want a mismatch error", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestTCPRecvSizeMismatch: a Recv into a tensor of another size than the Send's fails.
func TestTCPRecvSizeMismatch(t *testing.T) {
	ctx := context.Background()
	err := tcpRun(t, 2, nil, func(c parallel.Comm) error {
		dev := tensor.NewCPU()
		if c.Rank() == 0 {
			return c.Send(ctx, tensor.Ones(dev, tensor.F32, 5), 1)
		}
		err := c.Recv(ctx, tensor.Zeros(dev, tensor.F32, 6), 0)
		return tcpExpectPeerError(err, 0, "message #0", "want float32×6")
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestTCPConfigValidate(t *testing.T) {
	good := tcpConfig(1, 2, 29500)
	tests := []struct {
		name    string
		edit    func(*Config)
		mention string
	}{
		{"rank too big", func(c *Config) { c.Rank = 2 }, "rank 2"},
		{"no ranks", func(c *Config) { c.WorldSize = 0 }, "world size 0"},
		{"no token", func(c *Config) { c.Token = "" }, "MEGAGO_JOB_TOKEN"},
		{"no master", func(c *Config) { c.MasterAddr = "" }, "master address"},
		{"bad port", func(c *Config) { c.MasterPort = 70000 }, "port 70000"},
		{"negative timeout", func(c *Config) { c.Timeout = -1 }, "timeout"},
		{"tiny segments", func(c *Config) { c.SegmentBytes = 4 }, "SegmentBytes 4"},
		{"huge segments", func(c *Config) { c.SegmentBytes = 1 << 30 }, "SegmentBytes 1073741824"},
	}
	if err := good.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := good
			tc.edit(&cfg)
			err := cfg.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.mention) {
				t.Errorf("Validate() = %v, want an error mentioning %q", err, tc.mention)
			}
			if _, err := New(context.Background(), cfg); err == nil {
				t.Errorf("New accepted the config")
			}
		})
	}
}

// TestTCPRendezvousTimeout: rank 0 alone gives up after the timeout, naming the ranks
// that did not come.
func TestTCPRendezvousTimeout(t *testing.T) {
	cfg := tcpConfig(0, 3, freePort(t))
	cfg.Timeout = 200 * time.Millisecond
	_, err := New(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "ranks [1 2] did not connect") {
		t.Fatalf("got %v, want an error naming ranks 1 and 2", err)
	}
}

// TestTCPOversizedFrameFromPeer: a frame longer than the segment size, even from a rank
// that passed the handshake, breaks the connection (no allocation of its length) and
// fails the calls waiting on that rank, naming it.
func TestTCPOversizedFrameFromPeer(t *testing.T) {
	ctx := context.Background()
	err := tcpRun(t, 2, nil, func(c parallel.Comm) error {
		w := c.(*worldComm)
		if c.Rank() == 1 {
			return w.t.conns[0].write(ctx, header{kind: kindColl, op: transport.AllReduce, group: w.id}, make([]byte, 300))
		}
		err := c.Recv(ctx, tensor.Zeros(tensor.NewCPU(), tensor.F32, 1), 1)
		return tcpExpectPeerError(err, 1, "malformed frame", "300 bytes exceeds the limit of 256")
	})
	if err != nil {
		t.Fatal(err)
	}
}
