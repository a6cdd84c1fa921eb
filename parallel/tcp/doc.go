// Package tcp is parallel's TCP transport: processes on one or many hosts, each holding
// one world rank, connected pairwise over TCP (a full mesh), behind the parallel.Comm
// interface. A process joins its job with New; ConfigFromEnv reads the job from the
// environment that `megago launch`, torchrun or Slurm's srun set (RANK, WORLD_SIZE,
// LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, or SLURM_PROCID, SLURM_NTASKS,
// ...; MEGAGO_JOB_TOKEN, MEGAGO_TIMEOUT):
//
//	cfg, err := tcp.ConfigFromEnv(os.Getenv)
//	...
//	world, err := tcp.New(ctx, cfg) // a parallel.Comm; world.(io.Closer).Close() at the end
//
// # Reading order
//
//   - tcp.go: Config, New, and the state a process keeps: its connections, its groups
//     and how a group fails.
//   - env.go: ConfigFromEnv, torchrun's and Slurm's variables.
//   - rendezvous.go: how the processes find and check one another; handshake.go and
//     accept.go: the two sides of a handshake.
//   - frame.go: the wire format, every frame checked before its payload is read.
//   - conn.go: one connection to a peer, read without pause into per-group mailboxes.
//   - call.go: one call in flight (deadline, failure, frames sent and received).
//   - blame.go: whom a timeout blames, found by probing the ranks waited for.
//   - ring.go: the collectives (ring all-reduce, reduce-scatter, all-gather, chain
//     broadcast, dissemination barrier); p2p.go: Send, Recv, Split and AllToAllV (sends
//     and receives after an all-gather of the counts, parallel.AllToAllVByP2P).
//
// The element arithmetic of reductions and the argument checks are shared with the
// in-process transport (package parallel/internal/transport), so both reduce alike and
// fail alike.
//
// # Rendezvous
//
// Rank 0 listens on MasterAddr:MasterPort. Every other rank dials it, opens a listener
// of its own on an ephemeral port (on the interface that reaches rank 0) and sends a
// hello frame: protocol version, job token, rank, world size, segment size and that
// port. Rank 0 checks the token (in constant time), then the rest, answers with its own
// hello, and once every rank has joined sends each the table of listen addresses (host
// as rank 0 saw it, port as announced) and closes its listener. Then every pair i < j
// connects: j dials i and the two exchange hellos the same way. Rank 0's connection to
// rank i is the pair (0, i).
//
// A listener checks each connection on a goroutine of its own, up to 256 at once, and
// gives each Config.HandshakeTimeout (5 s by default) to present its hello. A connection
// that fails the check (wrong token, world size or segment size, a rank already joined,
// garbage, an oversized frame, nothing within the handshake timeout) is answered with a
// reject frame giving the reason when possible, closed and logged (Config.Logf); the
// job goes on. Connections beyond the 256 are refused at once as busy, with a reject
// frame marked for retry. A joining rank retries, with backoff, until Config.Timeout:
// while it cannot connect, after a network error during the handshake and after a busy
// refusal; any other refusal fails its New at once with the reason. So a burst of idle
// or garbage connections, however large, delays the job's ranks by about a handshake
// timeout; a sustained flood is a denial of service that only a firewall stops.
//
// A refused connection that presented the job's token is a rank of this job started
// with another configuration (WORLD_SIZE, SegmentBytes, or a rank number that another
// process has taken): the job cannot form as it is. The rank is refused at once ("world
// size 4 differs from the job's 3"); rank 0 then waits one more handshake timeout, so
// that a stray process does not disturb a job that forms, and otherwise gives up with
// that reason, which it also sends, in a reject frame, to the ranks that have joined:
// the whole job fails within seconds with a clear message instead of waiting for the
// timeout. Ranks that have not joined yet keep retrying until their own timeout,
// unless their launcher stops them when rank 0 exits (megago launch, torchrun and
// srun do). The token is sent in clear text: it keeps strays and other jobs out, it is
// no defence against someone who can read the network.
//
// # Traffic
//
// One goroutine per connection reads frames as they come and queues each by (group,
// kind), so the groups sharing a connection never wait on one another and a peer's
// writes never block on a full socket buffer. No frame payload may exceed
// Config.SegmentBytes; every frame of a call is checked against the call (collective,
// sequence number, dtype, length) and a mismatch is an error on both sides.
//
// # Collectives
//
// AllReduce is a ring reduce-scatter followed by a ring all-gather over the group's
// ranks in rank order; ReduceScatter and AllGather are those halves; Broadcast is a
// pipelined chain from the root; Barrier is a dissemination barrier. Data moves in
// segments: a rank sends segment k of a step, from a goroutine of its own, as soon as it
// has received (and reduced) segment k of the previous step, so both directions of every
// link are busy. Tensors in host memory (tensor.HostBytes) are sent from, reduced into
// and received into in place; others are staged a segment at a time through ReadHost and
// WriteHost; either way a call needs memory for the segments in flight only. Each chunk
// is reduced along the ring in a fixed order, so results are the same from run to run
// and on every rank (they may differ in the last bits from parallel.RunLocal's
// rank-order sums). After a collective has failed, a send of it still in progress may
// read its tensor while the caller has it back; what it sends goes to a failed group,
// which ignores it.
//
// # Failures
//
// Every blocking call honours its context and Config.Timeout. A broken connection fails
// the calls that need it with a *parallel.Error naming that peer. The rank that sees a
// group fail first tells the group's other members (an abort frame naming the culprit),
// and each of them passes it on before its own calls return, so the others fail at once,
// naming the same peer, instead of waiting for the timeout or blaming a rank that exited
// because of the failure. After any failure the group is unusable: later calls on it
// return the error at once. Caller bugs (a peer or root outside the group, sizes that do
// not fit a gather, an unknown op) panic, as in package parallel.
//
// A timeout blames the rank that stopped answering, not the neighbour that waits for
// it. A rank whose call times out waiting for peer X probes X: X's reader goroutine
// answers at once with the rank X waits for, if any, and the prober follows the waits
// to their end, a rank that does not answer within a second (stopped by SIGSTOP or a
// debugger, say), one that is in no call (its own code is stuck), or one that has
// already failed the group (whose culprit it takes). The error spells the chain out:
//
//	parallel: all-reduce on group world rank 0 of 4: peer 2: timed out after 2s waiting
//	for rank 3; rank 3 waits for rank 2 in all-reduce #38; rank 2 does not answer
//	(stopped?): context deadline exceeded
//
// Ranks that wait for one another (a Recv matched by a Recv) blame the peer first waited
// for, and the error says that they wait for one another. A process that hangs with its
// reader goroutines running still answers probes, and is blamed only if it is in no
// call: a rank stuck inside a call, waiting for nothing, cannot be told from a slow one.
package tcp
