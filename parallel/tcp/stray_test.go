package tcp

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"megago/parallel"
	"megago/tensor"
)

// strayDial connects to a loopback port, retrying with backoff while nothing listens
// there yet, for at most tcpTestTimeout.
func strayDial(port int) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), tcpTestTimeout)
	defer cancel()
	var d net.Dialer
	wait := 10 * time.Millisecond
	for {
		nc, err := d.DialContext(ctx, "tcp", joinHostPort("127.0.0.1", port))
		if err == nil {
			return nc, nil
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(wait):
		}
		wait = min(2*wait, 500*time.Millisecond)
	}
}

// strayFrame encodes a frame the way a (possibly hostile) client would.
func strayFrame(h header, p []byte) []byte {
	b := make([]byte, headerSize, headerSize+len(p))
	encodeHeader(b, h)
	return append(b, p...)
}

// strayRefused sends b on a new connection to port and returns the reason of the reject
// frame the server answers with ("" if it just closes). It fails if the server keeps the
// connection open.
func strayRefused(port int, b []byte) (string, error) {
	nc, err := strayDial(port)
	if err != nil {
		return "", err
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(tcpTestTimeout))
	nc.Write(b) // the server may close before reading it all
	data, err := io.ReadAll(nc)
	if err != nil && len(data) == 0 && !strings.Contains(err.Error(), "reset") {
		return "", fmt.Errorf("connection not closed: %v", err)
	}
	if len(data) == 0 {
		return "", nil
	}
	h, p, err := readFrame(bytes.NewReader(data), make([]byte, headerSize), 0, nil)
	if err != nil || h.kind != kindReject {
		return "", fmt.Errorf("answer %q is not a reject frame: %v", data, err)
	}
	return string(p), nil
}

// TestTCPStrayConnections: while rank 0 waits for the others, connections with a wrong
// token, garbage, oversized or malformed frames, or nothing at all are refused; a rank
// with a wrong token is told so at once; the job then forms and works.
func TestTCPStrayConnections(t *testing.T) {
	const n = 3
	port := freePort(t)
	var log tcpLog
	cfgFor := func(r int) Config { return log.config(r, n, port) }
	helloFrame := func(token string, rank, world int) []byte {
		p := encodeHello(hello{version: protocolVersion, rank: rank, world: world, port: 1, segment: 256, token: []byte(token)})
		return strayFrame(header{kind: kindHello, length: uint32(len(p))}, p)
	}

	comms := make([]parallel.Comm, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := func(r int) {
		wg.Go(func() { comms[r], errs[r] = New(context.Background(), cfgFor(r)) })
	}
	start(0)

	// A connection that sends nothing must not hold up the job.
	silent, err := strayDial(port)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()

	oversized := strayFrame(header{kind: kindColl}, nil)
	oversized[24], oversized[25], oversized[26], oversized[27] = 0, 0, 0, 0x40 // 1 GiB payload announced
	hugeHello := strayFrame(header{kind: kindHello}, nil)
	hugeHello[27] = 0xff
	strays := []struct {
		name   string
		send   []byte
		reason string // what the reject frame must say
	}{
		{"wrong token", helloFrame("not-the-token", 1, n), "wrong job token"},
		{"empty token", helloFrame("", 1, n), "wrong job token"},
		{"wrong world size", helloFrame(tcpTestToken, 1, n+1), "world size"},
		{"rank out of range", helloFrame(tcpTestToken, n, n), "rank 3"},
		{"claims rank 0", helloFrame(tcpTestToken, 0, n), "rank 0"},
		{"other segment size", func() []byte {
			b := helloFrame(tcpTestToken, 1, n)
			b[headerSize+12] = 1 // 257
			return b
		}(), "segment size 257"},
		{"garbage", bytes.Repeat([]byte("GET / HTTP/1.1\r\n"), 4), "bad magic"},
		{"data frame of 1 GiB", oversized, "exceeds the limit of 0"},
		{"hello of 4 GiB", hugeHello, "exceeds the limit of 1024"},
		{"truncated hello", helloFrame(tcpTestToken, 1, n)[:headerSize+5], ""},
		{"wrong version", func() []byte {
			b := helloFrame(tcpTestToken, 1, n)
			b[headerSize] = 9
			return b
		}(), "protocol version 9"},
	}
	for _, s := range strays {
		c := s.send
		if s.reason == "" { // truncated: the server waits for the rest until we close
			nc, err := strayDial(port)
			if err != nil {
				t.Fatal(err)
			}
			nc.Write(c)
			nc.Close()
			continue
		}
		reason, err := strayRefused(port, c)
		if err != nil {
			t.Errorf("%s: %v", s.name, err)
		} else if !strings.Contains(reason, s.reason) {
			t.Errorf("%s: refused with %q, want %q", s.name, reason, s.reason)
		}
	}

	// A rank of another job (wrong token) is refused at once rather than retrying.
	bad := cfgFor(2)
	bad.Token = "another-job"
	if _, err := New(context.Background(), bad); err == nil || !strings.Contains(err.Error(), "refused this rank: wrong job token") {
		t.Errorf("rank with the wrong token: got %v", err)
	}

	start(1)
	start(2)
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	tcpCheckJob(t, comms, "after the strays")
	if logged := log.lines(); len(logged) < len(strays) {
		t.Errorf("logged %d refusals, want at least %d:\n%s", len(logged), len(strays), strings.Join(logged, "\n"))
	}
}

// tcpLog collects the lines ranks log (their Config.Logf).
type tcpLog struct {
	mu     sync.Mutex
	logged []string
}

func (l *tcpLog) printf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.logged = append(l.logged, fmt.Sprintf(format, args...))
}

// config is tcpConfig(r, n, port) logging to l.
func (l *tcpLog) config(r, n, port int) Config {
	cfg := tcpConfig(r, n, port)
	cfg.Logf = l.printf
	return cfg
}

// lines returns the lines logged so far.
func (l *tcpLog) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.logged)
}

// tcpCheckJob checks that the ranks of a job that has formed can all-reduce (each its
// rank), then closes them; when says when, for the errors.
func tcpCheckJob(t *testing.T, comms []parallel.Comm, when string) {
	t.Helper()
	n := len(comms)
	var jobs sync.WaitGroup
	for r, c := range comms {
		jobs.Go(func() {
			defer c.(io.Closer).Close()
			x := tensor.Full(tensor.NewCPU(), tensor.F32, float64(r), 10)
			if err := c.AllReduce(context.Background(), x, parallel.Sum); err != nil {
				t.Errorf("rank %d %s: %v", r, when, err)
			} else if got, want := tensor.ToSlice[float32](x)[0], float32(n*(n-1)/2); got != want {
				t.Errorf("rank %d %s: sum %v, want %v", r, when, got, want)
			}
		})
	}
	jobs.Wait()
}
