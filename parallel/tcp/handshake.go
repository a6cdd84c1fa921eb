package tcp

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"time"
)

// The joining side of the handshake, and the frame I/O both sides use before a
// connection has its reader goroutine.

// errWrongToken is why a connection presenting another job's token is refused.
var errWrongToken = errors.New("wrong job token")

// refusedError is a reject frame's reason, as the rank it refused sees it.
type refusedError struct {
	reason string
	retry  bool // the refusal passes (flagRetry): try again
}

func (e *refusedError) Error() string { return "refused this rank: " + e.reason }

// join connects to addr and exchanges hellos with rank want, announcing the port that
// listen returns for the connection. Network errors and refusals marked for retry
// (the listener is busy) are retried, with backoff, until ctx ends; any other refusal,
// or an answer that is not a valid hello from rank want, is final.
func (t *endpoint) join(ctx context.Context, addr string, want int, listen func(net.Conn) (int, error)) (net.Conn, error) {
	var d net.Dialer
	wait := 10 * time.Millisecond
	for {
		nc, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			var retry bool
			retry, err = t.handshake(ctx, nc, want, listen)
			if err == nil {
				return nc, nil
			}
			nc.Close()
			if !retry {
				return nil, err
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("cannot join %s: %w (last attempt: %v)", addr, ctx.Err(), err)
		case <-time.After(wait):
		}
		wait = min(2*wait, 500*time.Millisecond)
	}
}

// handshake sends this rank's hello on a connection it dialed and checks the answer,
// which must come from rank want. retry reports whether the failure may pass: an I/O
// error, or a refusal marked for retry.
func (t *endpoint) handshake(ctx context.Context, nc net.Conn, want int, listen func(net.Conn) (int, error)) (retry bool, err error) {
	port, err := listen(nc)
	if err != nil {
		return false, err
	}
	me := hello{version: protocolVersion, rank: t.rank, world: t.world, port: port, segment: t.cfg.SegmentBytes, token: []byte(t.cfg.Token)}
	if err := writeRaw(ctx, nc, kindHello, 0, encodeHello(me)); err != nil {
		return true, err
	}
	f, p, err := readRawAny(ctx, nc, time.Now().Add(t.cfg.HandshakeTimeout))
	if err != nil {
		return !errors.Is(err, errFrame), err
	}
	switch f.kind {
	case kindReject:
		rf := &refusedError{reason: string(p), retry: f.flags&flagRetry != 0}
		return rf.retry, rf
	case kindHello:
	default:
		return false, fmt.Errorf("%w: expected a hello, got a %v frame", errFrame, f.kind)
	}
	h, err := decodeHello(p)
	if err != nil {
		return false, err
	}
	if err := t.checkHello(h, want, want+1); err != nil {
		return false, fmt.Errorf("answer: %w", err)
	}
	return false, nil
}

// checkHello checks a hello's token (first, in constant time), world size, rank and
// segment size.
func (t *endpoint) checkHello(h hello, lo, hi int) error {
	if subtle.ConstantTimeCompare(h.token, []byte(t.cfg.Token)) != 1 {
		return errWrongToken
	}
	if h.world != t.world {
		return fmt.Errorf("world size %d differs from the job's %d", h.world, t.world)
	}
	if h.rank < lo || h.rank >= hi {
		return fmt.Errorf("rank %d, expected one in [%d, %d)", h.rank, lo, hi)
	}
	if h.segment != t.cfg.SegmentBytes {
		return fmt.Errorf("segment size %d, this rank uses %d (tcp.Config.SegmentBytes must be the same on every rank)", h.segment, t.cfg.SegmentBytes)
	}
	return nil
}

// writeRaw writes one frame on a connection that has no reader goroutine yet, before
// ctx's deadline.
func writeRaw(ctx context.Context, nc net.Conn, kind frameKind, flags uint8, p []byte) error {
	b := make([]byte, headerSize+len(p))
	encodeHeader(b, header{kind: kind, flags: flags, length: uint32(len(p))})
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
