package tcp

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"time"

	"megago/parallel/internal/transport"
)

// Whom a timeout blames. A rank whose call times out waiting for peer X does not blame
// X at once: X may itself be waiting, for a rank that stopped (SIGSTOP, a debugger, a
// hung driver) or whose code is stuck elsewhere. It probes X instead: X's reader
// goroutine answers at once with what X waits for (a probeStatus), and the rank follows
// the chain of waits to its end: a rank that does not answer within probeWait, one that
// is in no call, or one that has already failed the group (whose culprit it adopts).
// Waits that form a cycle (ranks waiting on one another) blame X. Every rank of a ring
// thus names the same rank, whichever neighbour it was waiting for.

// probeWait bounds how long a rank waits for the answer to a probe; a live process
// answers from its reader goroutine, in microseconds.
const probeWait = time.Second

// probeStatus is the answer to a probe about a group: what the probed rank is doing.
type probeStatus struct {
	state probeState
	what  transport.Kind // the waiting call (probeWaiting)
	same  bool           // the waiting call is on the probed group
	peer  int            // world rank waited for (probeWaiting) or blamed (probeFailed, -1: none)
	seq   uint64         // the waiting call's collective number
	begun uint64         // collectives begun on the probed group
}

type probeState uint8

const (
	probeIdle    probeState = iota // in no call: its code is elsewhere
	probeWaiting                   // blocked in a call, waiting for peer
	probeFailed                    // the probed group has failed here, blaming peer
)

const probeStatusSize = 24

func encodeProbeStatus(s probeStatus) []byte {
	b := make([]byte, probeStatusSize)
	b[0], b[1] = byte(s.state), byte(s.what)
	if s.same {
		b[2] = 1
	}
	le := binary.LittleEndian
	le.PutUint32(b[4:], uint32(int32(s.peer)))
	le.PutUint64(b[8:], s.seq)
	le.PutUint64(b[16:], s.begun)
	return b
}

func decodeProbeStatus(b []byte) (probeStatus, error) {
	if len(b) != probeStatusSize {
		return probeStatus{}, fmt.Errorf("%w: probe reply of %d bytes, want %d", errFrame, len(b), probeStatusSize)
	}
	if b[0] > byte(probeFailed) {
		return probeStatus{}, fmt.Errorf("%w: probe reply in unknown state %d", errFrame, b[0])
	}
	le := binary.LittleEndian
	return probeStatus{state: probeState(b[0]), what: transport.Kind(b[1]), same: b[2] == 1,
		peer: int(int32(le.Uint32(b[4:]))), seq: le.Uint64(b[8:]), begun: le.Uint64(b[16:])}, nil
}

// status is this rank's answer to a probe about group gid.
func (t *endpoint) status(gid uint64) probeStatus {
	t.mu.Lock()
	var pick *call // the oldest waiting call, on gid if one waits there
	for _, o := range t.active {
		if o.waitOn.Load() >= 0 && (pick == nil || o.c.id == gid && pick.c.id != gid) {
			pick = o
		}
	}
	g := t.groups[gid]
	t.mu.Unlock()
	var s probeStatus
	if g != nil {
		s.begun = g.begun.Load()
		// Read after the calls: a call leaves the list only after it has failed the group.
		if f := g.failure(); f != nil {
			s.state, s.peer = probeFailed, f.culprit
			return s
		}
	}
	if pick != nil {
		s.state, s.what, s.same, s.peer, s.seq = probeWaiting, pick.what, pick.c.id == gid, int(pick.waitOn.Load()), pick.seq
	}
	return s
}

// answerProbe sends this rank's status about group h.group to the prober.
func (pc *peerConn) answerProbe(h header) {
	ctx, cancel := context.WithTimeout(context.Background(), abortWait)
	defer cancel()
	pc.write(ctx, header{kind: kindProbeReply, group: h.group, seq: h.seq}, encodeProbeStatus(pc.t.status(h.group)))
}

// probeAnswered hands a probe's answer to the prober, if it still waits.
func (t *endpoint) probeAnswered(n uint64, s probeStatus) {
	t.mu.Lock()
	ch := t.probes[n]
	t.mu.Unlock()
	if ch != nil {
		select {
		case ch <- s:
		default:
		}
	}
}

// probe asks world rank w what it is doing about group gid. ok is false when it did
// not answer within probeWait, or stop closed first.
func (t *endpoint) probe(w int, gid uint64, stop <-chan struct{}) (s probeStatus, ok bool) {
	n := t.probeSeq.Add(1)
	ch := make(chan probeStatus, 1)
	t.mu.Lock()
	t.probes[n] = ch
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		delete(t.probes, n)
		t.mu.Unlock()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), probeWait)
	defer cancel()
	if err := t.conns[w].write(ctx, header{kind: kindProbe, group: gid, seq: n}, nil); err != nil {
		return s, false
	}
	select {
	case s = <-ch:
		return s, true
	case <-ctx.Done():
	case <-stop:
	}
	return s, false
}

// waitFor records that the call is blocked on group rank peer, for probes.
func (o *call) waitFor(peer int) { o.waitOn.Store(int64(o.c.members[peer])) }

// blame follows the waits from group rank peer, which the call timed out waiting for,
// and returns the world rank to blame and how it was found ("rank 3; rank 3 waits for
// rank 2 in all-reduce #4; rank 2 does not answer (stopped?)"). It stops early, with
// what it has, if the group fails meanwhile (the failure's own culprit then wins).
func (o *call) blame(peer int) (culprit int, chain string) {
	o.blameOnce.Do(func() { o.culprit, o.chain = o.followWaits(peer) })
	return o.culprit, o.chain
}

func (o *call) followWaits(peer int) (int, string) {
	c := o.c
	first := c.members[peer]
	var b strings.Builder
	b.WriteString(c.rankName(first))
	seen := map[int]bool{c.t.rank: true}
	for x := first; ; {
		seen[x] = true
		s, ok := c.t.probe(x, c.id, c.g.failed)
		fmt.Fprintf(&b, "; %s ", c.rankName(x))
		switch {
		case !ok:
			b.WriteString("does not answer (stopped?)")
			return x, b.String()
		case s.state == probeIdle:
			fmt.Fprintf(&b, "is in no call: its own code is stuck or slow (it has begun %d collectives on group %s", s.begun, c.name)
			if o.what.Collective() {
				fmt.Fprintf(&b, "; this is %s #%d", o.what, o.seq)
			}
			b.WriteString(")")
			return x, b.String()
		case s.state == probeFailed && (s.peer < 0 || s.peer >= c.t.world):
			b.WriteString("has given up on the group")
			return x, b.String()
		case s.state == probeFailed:
			fmt.Fprintf(&b, "has given up on the group, blaming %s", c.rankName(s.peer))
			if s.peer == c.t.rank {
				b.WriteString(": the ranks wait for one another")
				return first, b.String()
			}
			return s.peer, b.String()
		case s.peer < 0 || s.peer >= c.t.world:
			b.WriteString("answers nonsense")
			return x, b.String()
		}
		fmt.Fprintf(&b, "waits for %s in %s", c.rankName(s.peer), s.what)
		switch {
		case !s.same:
			b.WriteString(" on another group")
		case s.what.Collective():
			fmt.Fprintf(&b, " #%d", s.seq)
		}
		if seen[s.peer] {
			b.WriteString(": the ranks wait for one another")
			return first, b.String()
		}
		x = s.peer
	}
}

// rankName names world rank w for this group's errors: by its group rank, or as a world
// rank when it is not a member.
func (c *comm) rankName(w int) string {
	switch r := c.groupRank(w); {
	case w == c.t.rank:
		return "this rank"
	case r < 0:
		return fmt.Sprintf("world rank %d", w)
	default:
		return fmt.Sprintf("rank %d", r)
	}
}
