package tcp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"
)

// The accepting side of the handshake: rank 0 during rendezvous, and every rank for the
// ranks above it when the mesh is built.

const (
	// maxPendingHandshakes bounds the connections being checked at once. More are
	// refused unread as busy (a reject frame marked flagRetry), so a flood of idle
	// connections can neither exhaust the process nor keep a rank of the job out for
	// longer than a handshake timeout: the rank retries.
	maxPendingHandshakes = 256
	// busyWait bounds the write of a busy refusal, which the accept loop makes itself.
	busyWait = 100 * time.Millisecond
)

type joinedPeer struct {
	nc   net.Conn
	port int
}

// arrival is an accepted connection whose hello passed the checks.
type arrival struct {
	nc net.Conn
	h  hello
}

// misfitError is why a hello that carries the job's token was refused: it comes from
// a rank of this job started with another configuration (world size, segment size, a
// rank number already taken), so the job may never form.
type misfitError struct {
	rank int // as the hello claims
	err  error
}

func (e *misfitError) Error() string { return e.err.Error() }

// acceptPeers accepts connections on ln until every rank in [lo, world) has joined with
// a valid hello, refusing the others, and closes ln. After refusing a rank of this job
// (a misfitError) it waits at most Config.HandshakeTimeout more for the job to form,
// then gives up with that refusal's reason. When it gives up, it tells the ranks that
// have joined why, in a reject frame.
func (t *endpoint) acceptPeers(ctx context.Context, ln net.Listener, lo int) (map[int]joinedPeer, error) {
	defer ln.Close()
	arrivals := make(chan arrival)
	misfits := make(chan error)
	done := make(chan struct{})
	defer close(done)
	go t.acceptLoop(ctx, ln, lo, arrivals, misfits, done)

	joined := map[int]joinedPeer{}
	var misfit error // the first refusal of a rank of this job
	var giveUp <-chan time.Time
	noteMisfit := func(err error) {
		if misfit == nil {
			misfit = err
			giveUp = time.After(t.cfg.HandshakeTimeout)
		}
	}
	for len(joined) < t.world-lo {
		select {
		case a := <-arrivals:
			if _, dup := joined[a.h.rank]; dup {
				err := fmt.Errorf("rank %d has already joined", a.h.rank)
				noteMisfit(fmt.Errorf("refused rank %d at %s: %w", a.h.rank, a.nc.RemoteAddr(), err))
				t.refuse(a.nc, 0, abortWait, err)
				continue
			}
			ack := hello{version: protocolVersion, rank: t.rank, world: t.world, segment: t.cfg.SegmentBytes, token: []byte(t.cfg.Token)}
			if err := writeRaw(ctx, a.nc, kindHello, 0, encodeHello(ack)); err != nil {
				t.cfg.Logf("parallel: tcp rank %d: answering rank %d at %s: %v", t.rank, a.h.rank, a.nc.RemoteAddr(), err)
				a.nc.Close()
				continue
			}
			joined[a.h.rank] = joinedPeer{a.nc, a.h.port}
		case err := <-misfits:
			noteMisfit(err)
		case <-giveUp:
			return nil, t.abandon(joined, fmt.Errorf("%w; the job did not form within %v after that (tcp.Config.HandshakeTimeout)", misfit, t.cfg.HandshakeTimeout))
		case <-ctx.Done():
			var missing []int
			for r := lo; r < t.world; r++ {
				if _, ok := joined[r]; !ok {
					missing = append(missing, r)
				}
			}
			err := fmt.Errorf("ranks %v did not connect to %s: %w", missing, ln.Addr(), ctx.Err())
			if misfit != nil {
				err = fmt.Errorf("%w; meanwhile it %w", err, misfit)
			}
			return nil, t.abandon(joined, err)
		}
	}
	return joined, nil
}

// acceptLoop accepts connections on ln until it is closed, checking up to
// maxPendingHandshakes of them at once, each on a goroutine of its own (so a connection
// that sends nothing holds up no other), and refusing more as busy. It hands those that
// pass to arrivals and reports the refused ranks of this job on misfits, until done.
func (t *endpoint) acceptLoop(ctx context.Context, ln net.Listener, lo int, arrivals chan<- arrival, misfits chan<- error, done <-chan struct{}) {
	sem := make(chan struct{}, maxPendingHandshakes)
	pause := 5 * time.Millisecond
	for {
		nc, err := ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil { // out of file descriptors, say: wait for some to be released
			t.cfg.Logf("parallel: tcp rank %d: accepting on %s: %v", t.rank, ln.Addr(), err)
			time.Sleep(pause)
			pause = min(2*pause, time.Second)
			continue
		}
		pause = 5 * time.Millisecond
		select {
		case sem <- struct{}{}:
		default:
			t.refuse(nc, flagRetry, busyWait, fmt.Errorf("busy: %d connections are being checked; try again", maxPendingHandshakes))
			continue
		}
		go func() {
			defer func() { <-sem }()
			addr := nc.RemoteAddr()
			h, err := t.readHello(ctx, nc, lo)
			if err != nil {
				t.refuse(nc, 0, abortWait, err)
				var m *misfitError
				if errors.As(err, &m) {
					select {
					case misfits <- fmt.Errorf("refused rank %d at %s: %w", m.rank, addr, m.err):
					case <-done:
					}
				}
				return
			}
			select {
			case arrivals <- arrival{nc, h}:
			case <-done:
				nc.Close()
			}
		}()
	}
}

// readHello reads and checks the hello of a connection this rank accepted, which has
// Config.HandshakeTimeout to send it. A hello with the job's token that fails the other
// checks is a *misfitError.
func (t *endpoint) readHello(ctx context.Context, nc net.Conn, lo int) (hello, error) {
	f, p, err := readRawAny(ctx, nc, time.Now().Add(t.cfg.HandshakeTimeout))
	if errors.Is(err, os.ErrDeadlineExceeded) && ctx.Err() == nil {
		return hello{}, fmt.Errorf("no hello within %v (tcp.Config.HandshakeTimeout)", t.cfg.HandshakeTimeout)
	}
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
	if err := t.checkHello(h, lo, t.world); err != nil {
		if !errors.Is(err, errWrongToken) {
			err = &misfitError{rank: h.rank, err: err}
		}
		return hello{}, err
	}
	return h, nil
}

// refuse answers a connection with a reject frame giving the reason (flags: 0, or
// flagRetry when the refusal passes), written within wait; closes it and logs.
func (t *endpoint) refuse(nc net.Conn, flags uint8, wait time.Duration, why error) {
	reason := why.Error()
	if len(reason) > helloMax {
		reason = reason[:helloMax]
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	writeRaw(ctx, nc, kindReject, flags, []byte(reason))
	cancel()
	nc.Close()
	t.cfg.Logf("parallel: tcp rank %d: refused connection from %s: %v", t.rank, nc.RemoteAddr(), why)
}

// abandon tells every joined rank that the rendezvous failed with err, closes their
// connections and returns err.
func (t *endpoint) abandon(joined map[int]joinedPeer, err error) error {
	why := fmt.Errorf("rank %d gave up the rendezvous: %w", t.rank, err)
	var wg sync.WaitGroup
	for _, j := range joined {
		wg.Go(func() { t.refuse(j.nc, 0, abortWait, why) })
	}
	wg.Wait()
	return err
}
