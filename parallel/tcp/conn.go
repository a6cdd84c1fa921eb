package tcp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"net"
	"sync"
	"time"
)

// peerConn is the connection between this rank and one other world rank, shared by every
// group both belong to. One goroutine reads it without pause, routing each data frame to
// the mailbox of its (group, kind) and each abort to its group, so a rank never stops
// draining a peer's socket: writers cannot deadlock on full socket buffers, and frames of
// one group never wait behind another's. Writers take turns through wsem, one frame at a
// time.
type peerConn struct {
	t    *endpoint
	peer int // world rank
	nc   net.Conn

	wsem chan struct{}    // holds one token while a frame is being written
	hdr  [headerSize]byte // header scratch, guarded by wsem

	mu       sync.Mutex
	boxes    map[boxKey]*mailbox
	err      error         // why the connection broke; nil while it works
	dead     chan struct{} // closed when err is set
	readDone chan struct{} // closed when readLoop returns
}

type boxKey struct {
	group uint64
	kind  frameKind
}

// mailbox queues the frames of one (group, kind) from one peer, in arrival order. Each
// queue has at most one reader at a time: a group's collectives run one after another.
type mailbox struct {
	q    []frame
	wake chan struct{} // signalled (capacity 1) when a frame is queued
}

type frame struct {
	h header
	p []byte // from the transport's pool
}

func newPeerConn(t *endpoint, peer int, nc net.Conn) *peerConn {
	return &peerConn{t: t, peer: peer, nc: nc, wsem: make(chan struct{}, 1),
		boxes: map[boxKey]*mailbox{}, dead: make(chan struct{}), readDone: make(chan struct{})}
}

// box returns the mailbox for k, creating it.
func (pc *peerConn) box(k boxKey) *mailbox {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	return pc.boxLocked(k)
}

func (pc *peerConn) boxLocked(k boxKey) *mailbox {
	b := pc.boxes[k]
	if b == nil {
		b = &mailbox{wake: make(chan struct{}, 1)}
		pc.boxes[k] = b
	}
	return b
}

// pop returns the oldest queued frame of b, or the connection's error when the queue is
// empty and the connection has broken; ok is false when neither.
func (pc *peerConn) pop(b *mailbox) (f frame, ok bool, err error) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if len(b.q) > 0 {
		f = b.q[0]
		b.q[0] = frame{}
		b.q = b.q[1:]
		return f, true, nil
	}
	return frame{}, false, pc.err
}

func (pc *peerConn) deliver(h header, p []byte) {
	pc.mu.Lock()
	b := pc.boxLocked(boxKey{h.group, h.kind})
	b.q = append(b.q, frame{h, p})
	pc.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// fail marks the connection broken with err (the first error wins) and closes it, which
// wakes every call waiting on it.
func (pc *peerConn) fail(err error) {
	pc.markBroken(err)
	pc.nc.Close()
}

func (pc *peerConn) markBroken(err error) {
	pc.mu.Lock()
	if pc.err == nil {
		pc.err = err
		close(pc.dead)
	}
	pc.mu.Unlock()
}

// failWrite is fail for a write error. The connection is closed only once the reader has
// stopped (or after abortWait): what the peer sent before it went away, an abort naming
// the rank at fault perhaps, is still read.
func (pc *peerConn) failWrite(err error) {
	pc.markBroken(err)
	go func() {
		pc.awaitReader()
		pc.nc.Close()
	}()
}

// awaitReader waits, at most abortWait, for readLoop to return.
func (pc *peerConn) awaitReader() {
	t := time.NewTimer(abortWait)
	defer t.Stop()
	select {
	case <-pc.readDone:
	case <-t.C:
	}
}

func (pc *peerConn) broken() error {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	return pc.err
}

// readLoop reads frames until the connection breaks.
func (pc *peerConn) readLoop() {
	defer close(pc.readDone)
	br := bufio.NewReaderSize(pc.nc, 64<<10)
	var hb [headerSize]byte
	for {
		h, p, err := readFrame(br, hb[:], uint32(pc.t.cfg.SegmentBytes), pc.t.pool.get)
		if err != nil {
			pc.fail(pc.t.connError(err))
			return
		}
		switch h.kind {
		case kindColl, kindP2P:
			pc.deliver(h, p)
		case kindAbort:
			a, err := decodeAbort(p)
			if err != nil {
				pc.fail(err)
				return
			}
			pc.t.abortReceived(h.group, a, pc.peer)
		case kindProbe:
			pc.t.pool.put(p)
			go pc.answerProbe(h)
		case kindProbeReply:
			s, err := decodeProbeStatus(p)
			pc.t.pool.put(p)
			if err != nil {
				pc.fail(err)
				return
			}
			pc.t.probeAnswered(h.seq, s)
		default:
			pc.fail(fmt.Errorf("%w: unexpected %v frame after the handshake", errFrame, h.kind))
			return
		}
	}
}

// write sends one frame. The write deadline is ctx's; a write that fails or times out
// may have left half a frame on the wire, so it breaks the connection.
func (pc *peerConn) write(ctx context.Context, h header, p []byte) error {
	select {
	case pc.wsem <- struct{}{}:
	case <-pc.dead:
		return pc.broken()
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-pc.wsem }()
	if err := pc.broken(); err != nil {
		return err
	}
	dl, _ := ctx.Deadline()
	pc.nc.SetWriteDeadline(dl)
	h.length = uint32(len(p))
	encodeHeader(pc.hdr[:], h)
	bufs := net.Buffers{pc.hdr[:], p}
	if _, err := bufs.WriteTo(pc.nc); err != nil {
		err = fmt.Errorf("write: %w", pc.t.connError(err))
		pc.failWrite(err)
		return err
	}
	return nil
}

// connError describes why reading or writing a connection failed.
func (t *endpoint) connError(err error) error {
	t.mu.Lock()
	closed := t.closed
	t.mu.Unlock()
	switch {
	case closed:
		return errClosed
	case errors.Is(err, errFrame):
		return err
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("connection lost: the peer closed it (exited or failed): %w", err)
	}
	return fmt.Errorf("connection lost: %w", err)
}

// errClosed is the cause of failures after Close.
var errClosed = errors.New("communicator closed")

// bufPool recycles byte buffers in power-of-two size classes from 4 KiB to 1 GiB, so that
// frames and collective staging buffers do not churn the garbage collector.
type bufPool struct {
	classes [poolClasses]sync.Pool
}

const (
	poolMinShift = 12
	poolClasses  = 31 - poolMinShift
)

func poolClass(n int) int {
	if n <= 1<<poolMinShift {
		return 0
	}
	return bits.Len(uint(n-1)) - poolMinShift
}

// get returns a buffer of length n (its contents are arbitrary).
func (bp *bufPool) get(n int) []byte {
	c := poolClass(n)
	if c >= poolClasses {
		return make([]byte, n)
	}
	if v := bp.classes[c].Get(); v != nil {
		return (*v.(*[]byte))[:n]
	}
	return make([]byte, n, 1<<(c+poolMinShift))
}

// put returns b to the pool; b must not be used afterwards.
func (bp *bufPool) put(b []byte) {
	c := poolClass(cap(b))
	if c < poolClasses && cap(b) == 1<<(c+poolMinShift) {
		b = b[:0]
		bp.classes[c].Put(&b)
	}
}
