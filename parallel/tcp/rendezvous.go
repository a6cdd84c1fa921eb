package tcp

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"
)

const (
	// helloWait bounds how long a connection may take to send its hello.
	helloWait = 10 * time.Second
	// maxPendingHandshakes bounds the connections being checked at once; more are
	// closed unread, so a flood of strays cannot exhaust the process.
	maxPendingHandshakes = 256
)

// errWrongToken is why a connection presenting another job's token is refused.
var errWrongToken = errors.New("wrong job token")

// rendezvous connects this rank to every other (see Rendezvous in doc.go).
func (t *endpoint) rendezvous(ctx context.Context) error {
	if t.rank == 0 {
		return t.rendezvousRoot(ctx)
	}
	return t.rendezvousPeer(ctx)
}

func (t *endpoint) rendezvousRoot(ctx context.Context) error {
	host := ""
	if isLoopback(t.cfg.MasterAddr) {
		host = t.cfg.MasterAddr
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", joinHostPort(host, t.cfg.MasterPort))
	if err != nil {
		return err
	}
	joined, err := t.acceptPeers(ctx, ln, 1)
	if err != nil {
		return err
	}
	addrs := make([]string, t.world)
	for r := 1; r < t.world; r++ {
		j := joined[r]
		ip := j.nc.RemoteAddr().(*net.TCPAddr).IP
		addrs[r] = joinHostPort(ip.String(), j.port)
		t.conns[r] = newPeerConn(t, r, j.nc)
	}
	table := encodeTable(addrs)
	for r := 1; r < t.world; r++ {
		if err := writeRaw(ctx, t.conns[r].nc, kindTable, table); err != nil {
			return fmt.Errorf("sending the address table to rank %d: %w", r, err)
		}
	}
	return nil
}

func (t *endpoint) rendezvousPeer(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	master := t.masterHostPort()
	nc, err := dialRetry(ctx, master)
	if err != nil {
		return err
	}
	t.conns[0] = newPeerConn(t, 0, nc)
	// Listen for higher ranks on the interface that reaches rank 0.
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", joinHostPort(nc.LocalAddr().(*net.TCPAddr).IP.String(), 0))
	if err != nil {
		return err
	}
	if err := t.handshake(ctx, nc, 0, ln.Addr().(*net.TCPAddr).Port); err != nil {
		ln.Close()
		return fmt.Errorf("rank 0 at %s: %w", master, err)
	}
	p, err := readRaw(ctx, nc, kindTable, time.Time{})
	if err != nil {
		ln.Close()
		return fmt.Errorf("waiting for the address table from rank 0: %w", err)
	}
	addrs, err := decodeTable(p, t.world)
	if err != nil {
		ln.Close()
		return fmt.Errorf("address table from rank 0: %w", err)
	}

	type accepted struct {
		joined map[int]joinedPeer
		err    error
	}
	acc := make(chan accepted, 1)
	go func() {
		j, err := t.acceptPeers(ctx, ln, t.rank+1)
		acc <- accepted{j, err}
	}()
	err = t.dialLower(ctx, addrs)
	if err != nil {
		cancel()
	}
	a := <-acc
	if err == nil {
		err = a.err
	}
	for r, j := range a.joined {
		if err != nil {
			j.nc.Close()
		} else {
			t.conns[r] = newPeerConn(t, r, j.nc)
		}
	}
	return err
}

// dialLower connects to every rank in [1, t.rank).
func (t *endpoint) dialLower(ctx context.Context, addrs []string) error {
	for r := 1; r < t.rank; r++ {
		nc, err := dialRetry(ctx, addrs[r])
		if err != nil {
			return fmt.Errorf("rank %d: %w", r, err)
		}
		t.conns[r] = newPeerConn(t, r, nc)
		if err := t.handshake(ctx, nc, r, 0); err != nil {
			return fmt.Errorf("rank %d at %s: %w", r, addrs[r], err)
		}
	}
	return nil
}

// handshake sends this rank's hello on a connection it dialed and checks the answer,
// which must come from rank want.
func (t *endpoint) handshake(ctx context.Context, nc net.Conn, want, port int) error {
	me := hello{version: protocolVersion, rank: t.rank, world: t.world, port: port, segment: t.cfg.SegmentBytes, token: []byte(t.cfg.Token)}
	if err := writeRaw(ctx, nc, kindHello, encodeHello(me)); err != nil {
		return err
	}
	f, p, err := readRawAny(ctx, nc, time.Now().Add(helloWait))
	if err != nil {
		return err
	}
	switch f.kind {
	case kindReject:
		return fmt.Errorf("refused this rank: %s", p)
	case kindHello:
	default:
		return fmt.Errorf("%w: expected a hello, got a %v frame", errFrame, f.kind)
	}
	h, err := decodeHello(p)
	if err != nil {
		return err
	}
	if err := t.checkHello(h, want, want+1); err != nil {
		return fmt.Errorf("answer: %w", err)
	}
	return nil
}

// checkHello checks a hello's token (first, in constant time), world size, rank and
// segment size.
func (t *endpoint) checkHello(h hello, lo, hi int) error {
	if subtle.ConstantTimeCompare(h.token, []byte(t.cfg.Token)) != 1 {
		return errWrongToken
	}
	if h.world != t.world {
		return fmt.Errorf("world size %d, this job has %d", h.world, t.world)
	}
	if h.rank < lo || h.rank >= hi {
		return fmt.Errorf("rank %d, expected one in [%d, %d)", h.rank, lo, hi)
	}
	if h.segment != t.cfg.SegmentBytes {
		return fmt.Errorf("segment size %d, this rank uses %d (tcp.Config.SegmentBytes must be the same on every rank)", h.segment, t.cfg.SegmentBytes)
	}
	return nil
}

type joinedPeer struct {
	nc   net.Conn
	port int
}

// acceptPeers accepts connections on ln until every rank in [lo, world) has joined with
// a valid hello, refusing the others, and closes ln.
func (t *endpoint) acceptPeers(ctx context.Context, ln net.Listener, lo int) (map[int]joinedPeer, error) {
	defer ln.Close()
	type arrival struct {
		nc net.Conn
		h  hello
	}
	arrivals := make(chan arrival)
	done := make(chan struct{})
	defer close(done)
	go func() {
		sem := make(chan struct{}, maxPendingHandshakes)
		for {
			nc, err := ln.Accept()
			if err != nil {
				return // ln closed
			}
			select {
			case sem <- struct{}{}:
			default:
				nc.Close()
				t.cfg.Logf("parallel: tcp rank %d: refused connection from %s: too many connections being checked", t.rank, nc.RemoteAddr())
				continue
			}
			go func() {
				defer func() { <-sem }()
				h, err := t.readHello(ctx, nc, lo)
				if err != nil {
					t.refuse(nc, err)
					return
				}
				select {
				case arrivals <- arrival{nc, h}:
				case <-done:
					nc.Close()
				}
			}()
		}
	}()

	joined := map[int]joinedPeer{}
	for len(joined) < t.world-lo {
		select {
		case a := <-arrivals:
			if _, dup := joined[a.h.rank]; dup {
				t.refuse(a.nc, fmt.Errorf("rank %d has already joined", a.h.rank))
				continue
			}
			ack := hello{version: protocolVersion, rank: t.rank, world: t.world, segment: t.cfg.SegmentBytes, token: []byte(t.cfg.Token)}
			if err := writeRaw(ctx, a.nc, kindHello, encodeHello(ack)); err != nil {
				t.cfg.Logf("parallel: tcp rank %d: answering rank %d at %s: %v", t.rank, a.h.rank, a.nc.RemoteAddr(), err)
				a.nc.Close()
				continue
			}
			joined[a.h.rank] = joinedPeer{a.nc, a.h.port}
		case <-ctx.Done():
			var missing []int
			for r := lo; r < t.world; r++ {
				if _, ok := joined[r]; !ok {
					missing = append(missing, r)
				}
			}
			for _, j := range joined {
				j.nc.Close()
			}
			return nil, fmt.Errorf("ranks %v did not connect to %s: %w", missing, ln.Addr(), ctx.Err())
		}
	}
	return joined, nil
}

// readHello reads and checks the hello of a connection this rank accepted.
func (t *endpoint) readHello(ctx context.Context, nc net.Conn, lo int) (hello, error) {
	f, p, err := readRawAny(ctx, nc, time.Now().Add(helloWait))
	if err != nil {
		return hello{}, err
	}
	if f.kind != kindHello {
		return hello{}, fmt.Errorf("%w: expected a hello, got a %v frame", errFrame, f.kind)
	}
	h, err := decodeHello(p)
	if err != nil {
		return hello{}, err
	}
	return h, t.checkHello(h, lo, t.world)
}

// refuse answers a connection that failed its check with the reason, closes it and logs.
func (t *endpoint) refuse(nc net.Conn, why error) {
	reason := why.Error()
	if len(reason) > helloMax {
		reason = reason[:helloMax]
	}
	ctx, cancel := context.WithTimeout(context.Background(), abortWait)
	writeRaw(ctx, nc, kindReject, []byte(reason))
	cancel()
	nc.Close()
	t.cfg.Logf("parallel: tcp rank %d: refused connection from %s: %v", t.rank, nc.RemoteAddr(), why)
}

// writeRaw writes one frame on a connection that has no reader goroutine yet.
func writeRaw(ctx context.Context, nc net.Conn, kind frameKind, p []byte) error {
	b := make([]byte, headerSize+len(p))
	encodeHeader(b, header{kind: kind, length: uint32(len(p))})
	copy(b[headerSize:], p)
	dl, _ := ctx.Deadline()
	nc.SetWriteDeadline(dl)
	_, err := nc.Write(b)
	nc.SetWriteDeadline(time.Time{})
	return err
}

// readRawAny reads one handshake frame (hello, reject or table) before dl or ctx's end.
// Data frames are refused: their length limit is zero here.
func readRawAny(ctx context.Context, nc net.Conn, dl time.Time) (header, []byte, error) {
	if cdl, ok := ctx.Deadline(); ok && (dl.IsZero() || cdl.Before(dl)) {
		dl = cdl
	}
	nc.SetReadDeadline(dl)
	stop := context.AfterFunc(ctx, func() { nc.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	var hb [headerSize]byte
	h, p, err := readFrame(nc, hb[:], 0, nil)
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
		return header{}, nil, err
	}
	nc.SetReadDeadline(time.Time{})
	return h, p, nil
}

// readRaw is readRawAny for a frame of kind want; a reject frame becomes an error.
func readRaw(ctx context.Context, nc net.Conn, want frameKind, dl time.Time) ([]byte, error) {
	h, p, err := readRawAny(ctx, nc, dl)
	switch {
	case err != nil:
		return nil, err
	case h.kind == kindReject:
		return nil, fmt.Errorf("refused: %s", p)
	case h.kind != want:
		return nil, fmt.Errorf("%w: expected a %v frame, got %v", errFrame, want, h.kind)
	}
	return p, nil
}

// dialRetry connects to addr, retrying with backoff until ctx ends: the listener may not
// be up yet.
func dialRetry(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	wait := 10 * time.Millisecond
	for {
		nc, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			return nc, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("cannot connect to %s: %w (last attempt: %v)", addr, ctx.Err(), err)
		case <-time.After(wait):
		}
		wait = min(2*wait, 500*time.Millisecond)
	}
}

func joinHostPort(host string, port int) string { return net.JoinHostPort(host, strconv.Itoa(port)) }

// isLoopback reports whether host names this machine's loopback interface.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
