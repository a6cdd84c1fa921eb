package tcp

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync"
	"sync/atomic"
	"time"

	"megago/parallel"
)

// DefaultTimeout is the TCP transport's timeout when Config.Timeout is zero.
const DefaultTimeout = 5 * time.Minute

// DefaultHandshakeTimeout is Config.HandshakeTimeout's default.
const DefaultHandshakeTimeout = 5 * time.Second

// Config configures New. ConfigFromEnv fills it from the environment that
// megago launch, torchrun or Slurm's srun set.
type Config struct {
	Rank      int // this process's world rank, in [0, WorldSize)
	WorldSize int // number of processes in the job, ≥ 1

	// LocalRank and LocalWorldSize locate the process on its host (to pick a device, say);
	// the transport does not use them. -1 means unknown.
	LocalRank, LocalWorldSize int

	// MasterAddr and MasterPort are where rank 0 listens. Rank 0 binds MasterAddr itself
	// when it is a loopback address, and every interface otherwise.
	MasterAddr string
	MasterPort int

	// Token is the job's shared secret: connections that do not present it are refused.
	Token string

	// Timeout bounds rendezvous and every blocking call; 0 means DefaultTimeout.
	Timeout time.Duration
	// HandshakeTimeout bounds each handshake during rendezvous: how long an accepted
	// connection may take to present its hello and a joiner waits for the answer. It is
	// also how long rank 0 still waits for the job to form after refusing a rank of
	// this job (one with its token) whose configuration differs. 0 means
	// DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
	// SegmentBytes is the pipelining unit of collectives and the largest frame payload
	// sent or accepted; 0 means 1 MiB. It is rounded down to a multiple of 8. Every rank
	// must use the same value (the handshake checks it). A peer announcing a larger
	// frame breaks its connection, so no length read from the wire allocates more.
	SegmentBytes int

	// Logf reports refused connections; nil means log.Printf.
	Logf func(format string, args ...any)
}

const (
	defaultSegmentBytes = 1 << 20
	maxSegmentBytes     = 256 << 20
	maxWorldSize        = 1 << 16
)

// Validate reports the first field that cannot work.
func (c Config) Validate() error {
	switch {
	case c.WorldSize < 1 || c.WorldSize > maxWorldSize:
		return fmt.Errorf("parallel: tcp.Config: world size %d not in [1, %d]", c.WorldSize, maxWorldSize)
	case c.Rank < 0 || c.Rank >= c.WorldSize:
		return fmt.Errorf("parallel: tcp.Config: rank %d not in [0, %d)", c.Rank, c.WorldSize)
	case c.Timeout < 0:
		return fmt.Errorf("parallel: tcp.Config: negative timeout %v", c.Timeout)
	case c.HandshakeTimeout < 0:
		return fmt.Errorf("parallel: tcp.Config: negative handshake timeout %v", c.HandshakeTimeout)
	case c.SegmentBytes != 0 && (c.SegmentBytes < 8 || c.SegmentBytes > maxSegmentBytes):
		return fmt.Errorf("parallel: tcp.Config: SegmentBytes %d not in [8, %d]", c.SegmentBytes, maxSegmentBytes)
	case c.WorldSize == 1:
		return nil
	case c.Token == "":
		return errors.New("parallel: tcp.Config: empty job token (set MEGAGO_JOB_TOKEN; megago launch does)")
	case len(c.Token) > tokenMax:
		return fmt.Errorf("parallel: tcp.Config: job token of %d bytes, at most %d", len(c.Token), tokenMax)
	case c.MasterAddr == "":
		return errors.New("parallel: tcp.Config: no master address")
	case c.MasterPort < 1 || c.MasterPort > 65535:
		return fmt.Errorf("parallel: tcp.Config: master port %d not in [1, 65535]", c.MasterPort)
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.HandshakeTimeout == 0 {
		c.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if c.SegmentBytes == 0 {
		c.SegmentBytes = defaultSegmentBytes
	}
	c.SegmentBytes &^= 7
	if c.Logf == nil {
		c.Logf = log.Printf
	}
	return c
}

// New joins the job cfg describes and returns this process's world Comm once every rank
// has joined. It blocks until then, ctx ends or cfg.Timeout passes. The Comm also
// implements io.Closer: Close closes every connection, which fails the calls in flight
// on this rank and, on its peers, the calls that wait for it.
func New(ctx context.Context, cfg Config) (parallel.Comm, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	t := &endpoint{cfg: cfg, rank: cfg.Rank, world: cfg.WorldSize, conns: make([]*peerConn, cfg.WorldSize),
		groups: map[uint64]*groupState{}, probes: map[uint64]chan probeStatus{}}
	if cfg.WorldSize > 1 {
		rctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
		defer cancel()
		if err := t.rendezvous(rctx); err != nil {
			t.close()
			return nil, fmt.Errorf("parallel: tcp rendezvous of rank %d of %d via %s: %w", cfg.Rank, cfg.WorldSize, t.masterHostPort(), err)
		}
		for _, pc := range t.conns {
			if pc != nil {
				pc.nc.SetDeadline(time.Time{})
				go pc.readLoop()
			}
		}
	}
	members := make([]int, cfg.WorldSize)
	for i := range members {
		members[i] = i
	}
	c, err := t.newComm(worldGroupID, "world", members, cfg.Rank)
	if err != nil {
		return nil, err
	}
	return &worldComm{c}, nil
}

// endpoint is one process's side of a TCP job.
type endpoint struct {
	cfg   Config
	rank  int // world rank
	world int
	conns []*peerConn // by world rank; nil at this rank's index
	pool  bufPool

	probeSeq atomic.Uint64 // probes sent

	mu     sync.Mutex
	groups map[uint64]*groupState
	closed bool
	active []*call                     // calls in progress, oldest first, for probes
	probes map[uint64]chan probeStatus // probes awaiting their answer, by number
}

const worldGroupID = 1

func (t *endpoint) close() {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	for _, pc := range t.conns {
		if pc != nil {
			pc.fail(errClosed)
		}
	}
}

// group returns the state of group id, creating it: an abort may arrive for a group this
// rank has not created yet.
func (t *endpoint) group(id uint64) *groupState {
	t.mu.Lock()
	defer t.mu.Unlock()
	g := t.groups[id]
	if g == nil {
		g = &groupState{id: id, failed: make(chan struct{}), told: make(chan struct{})}
		t.groups[id] = g
	}
	return g
}

// newComm creates this rank's handle on group id.
func (t *endpoint) newComm(id uint64, name string, members []int, rank int) (*comm, error) {
	g := t.group(id)
	t.mu.Lock()
	created := g.members != nil
	if !created {
		g.members = members
	}
	t.mu.Unlock()
	if created {
		return nil, fmt.Errorf("parallel: tcp: group id %#x of %q already in use", id, name)
	}
	return &comm{t: t, id: id, name: name, rank: rank, members: members, g: g,
		sendSeq: make([]atomic.Uint64, len(members)), recvSeq: make([]atomic.Uint64, len(members))}, nil
}

// groupState is what the ranks of a group share on this process: whether the group has
// failed, and why.
type groupState struct {
	id      uint64
	members []int         // world ranks, once the group exists here; guarded by the transport's mu
	begun   atomic.Uint64 // collectives begun on this rank, for probes

	mu     sync.Mutex
	cause  *groupFailure
	failed chan struct{} // closed when cause is set
	told   chan struct{} // closed once this rank has told the other members
}

// groupFailure records why a group failed.
type groupFailure struct {
	culprit  int   // world rank at fault, or -1
	reporter int   // world rank that saw the failure (this rank when seen here)
	err      error // what it saw
}

// fail records f unless the group has already failed, and reports whether it did.
func (g *groupState) fail(f groupFailure) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cause != nil {
		return false
	}
	g.cause = &f
	close(g.failed)
	return true
}

// abortReceived records a failure that peer reports for group id, and passes it on.
//
// Every rank that learns of a group's failure tells every other member before any of
// its calls returns the failure (and so before its process may exit): the report then
// precedes, on each connection, the end of that connection, and no rank mistakes a
// rank that exits because of the failure for its cause.
func (t *endpoint) abortReceived(id uint64, a abortMsg, peer int) {
	if a.culprit < -1 || a.culprit >= t.world {
		a.culprit = -1
	}
	if a.reporter < 0 || a.reporter >= t.world {
		a.reporter = peer
	}
	g := t.group(id)
	if !g.fail(groupFailure{culprit: a.culprit, reporter: a.reporter, err: errors.New(a.reason)}) {
		return
	}
	t.mu.Lock()
	members := g.members
	t.mu.Unlock()
	go t.tellGroup(g, members, a, peer)
}

// tellGroup sends a to every member of g but this rank and skip, then closes g.told.
func (t *endpoint) tellGroup(g *groupState, members []int, a abortMsg, skip int) {
	defer close(g.told)
	p := encodeAbort(a)
	var wg sync.WaitGroup
	for _, w := range members {
		if w == t.rank || w == skip {
			continue
		}
		pc := t.conns[w]
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), abortWait)
			defer cancel()
			pc.write(ctx, header{kind: kindAbort, group: g.id}, p)
		})
	}
	wg.Wait()
}

func (g *groupState) failure() *groupFailure {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.cause
}

// comm is one rank's handle on a group of a TCP job.
type comm struct {
	t       *endpoint
	id      uint64 // group id carried by every frame of the group
	name    string
	rank    int
	members []int // world rank of each group rank
	g       *groupState

	seq              uint64          // collectives started; they run one at a time
	sendSeq, recvSeq []atomic.Uint64 // messages sent to / received from each group rank
}

func (c *comm) Rank() int           { return c.rank }
func (c *comm) Size() int           { return len(c.members) }
func (c *comm) Name() string        { return c.name }
func (c *comm) WorldRank(r int) int { return c.members[r] }

// groupRank returns the group rank of world rank w, or -1.
func (c *comm) groupRank(w int) int {
	for i, m := range c.members {
		if m == w {
			return i
		}
	}
	return -1
}

func (c *comm) conn(r int) *peerConn { return c.t.conns[c.members[r]] }

// worldComm is the world Comm New returns; it can be closed.
type worldComm struct{ *comm }

// Close closes every connection of this process's transport, failing calls in flight on
// every group.
func (w *worldComm) Close() error {
	w.t.close()
	return nil
}

func (t *endpoint) masterHostPort() string {
	return joinHostPort(t.cfg.MasterAddr, t.cfg.MasterPort)
}
