// Package parallel is megago's communication layer: the Comm interface that every
// collective goes through, the in-process transport, the Mesh that lays TP × CP × PP × DP
// ranks out in Megatron's order (and the same ranks again as expert-TP × EP × expert-DP
// × PP for mixture-of-experts layers), and the tensor- and sequence-parallel mappings.
// It works on tensors only; it never sees a layer or a parameter. The TCP transport, for
// processes on one or many hosts, is package megago/parallel/tcp; the NCCL one is in
// package cuda.
//
// # Reading order
//
//   - comm.go: Comm (Rank, Size, AllReduce, AllGather, ReduceScatter, AllToAllV,
//     Broadcast, Send, Recv, Barrier, Split), Op and Error.
//   - alltoall.go: AllToAllVByP2P, the all-to-all with per-rank counts (expert
//     parallelism's token exchange) that every transport uses: an all-gather of the send
//     and receive counts, checked on every rank, then a Send to and a Recv from each peer.
//   - local.go: the in-process transport. RunLocal(n, fn) runs n goroutine ranks; tests
//     and CPU experiments use it. Its groups meet in local_collectives.go (each call a
//     transport.Kind, checked to agree across ranks) and local_p2p.go (Send's queues);
//     local_world.go aborts a job whose ranks fail or deadlock.
//   - tcp/: the TCP transport (tcp.New, tcp.ConfigFromEnv), configured from torchrun's
//     or Slurm's environment (`megago launch` sets it); its doc.go has its own reading
//     order.
//   - internal/transport: what the transports share: the kinds of call, the argument
//     checks, and the element arithmetic of reductions over host bytes (hostbuf.go, one
//     generic loop per family of dtypes). internal/commtest: the collective suite every
//     transport passes, and Mesh, the check of every mesh group on a transport.
//   - mesh_sizes.go, mesh_expert.go, mesh_grid.go: Sizes, Coord and ExpertCoord, the pure
//     rank arithmetic of both decompositions; mesh.go: Mesh builds every group.
//   - mappings.go: CopyToTP, ReduceFromTP, ScatterToTP, GatherFromTP, ScatterToSP,
//     GatherFromSP, ReduceScatterToSP, each named after its forward with its backward
//     beside it; mappings_moe.go: the row mappings of mixture-of-experts token dispatch
//     (AllToAllRows, GatherRowsV, ReduceScatterRowsV: row counts that differ by rank)
//     and GatherFromSPNoReduce; mappings_cp.go: the context-parallel mappings of
//     attention heads [B, H, S, HS] held in Megatron's load-balanced chunks
//     (AllToAllCPSeqToHeads and its inverse AllToAllCPHeadsToSeq, Ulysses' exchange of
//     sequence for heads; GatherFromCP, the all-gather of keys and values).
//   - p2p.go: P2P, a pipeline stage's point-to-point channels: activations forward,
//     gradients backward, each message behind a shape header (variable sequence
//     lengths), combined send-and-receive calls that cannot deadlock.
//   - schedule.go: the schedules as pure plans (Schedule.Plan lists a rank's forward and
//     backward steps): NoPipelining, OneFOneB, Interleaved (Megatron's order and
//     constraints), ForwardOnly.
//   - schedule_run.go: Pipeline runs a plan: Train (forward and backward, losses divided
//     by M, gradients left accumulated) and Eval (forward only). The model is a
//     ForwardFunc; Hooks let a training loop act at fixed points.
//   - trace.go, trace_timeline.go: Trace records (time, step, micro-batch, chunk);
//     WriteTimeline draws it, BubbleFraction measures the bubble, Simulate lays a
//     schedule out with ideal timing.
//   - ddp.go: GradSync, data-parallel gradient reduction bucket by bucket as backward
//     completes the buckets (gradient hooks), overlapping the rest of backward.
//
// Stage construction, the tied embedding's synchronization and the optimizer step are in
// package train, which sees models and optimizers; this package does not.
//
// # Pipelines
//
// A Pipeline knows only tensors: a ForwardFunc gets a micro-batch index, a model chunk
// and (after the first stage) the received activation, a leaf requiring grad, and
// returns the activation to send or, on the last stage, the loss. Each micro-batch's
// activations live in a tensor.Scope that is suspended between its forward and backward
// steps and closed as soon as its input gradient is sent, so memory follows the
// schedule: at most min(p−r, M) micro-batches on stage r under 1F1B. Each micro-batch's
// loss is divided by M before backward; a data-parallel reduction then averages over DP,
// so the gradients are those of the mean loss (MEGATRON-FACTS.md). The schedules send
// and receive on two duplicates of the PP group (one per direction) and rely on Send
// not waiting for its Recv, as both transports guarantee; every schedule's plans are
// checked free of deadlock by Simulate in the tests.
//
// # Expert parallelism
//
// As in Megatron-core, the world is decomposed twice over the same ranks: TP × CP × DP ×
// PP for dense layers and ETP × EP × EDP × PP for the experts of MoE layers (Sizes.EP,
// Sizes.ETP; EDP = World/(ETP·EP·PP) is what is left). Both orders put PP slowest, so the
// pipeline is the same for both, and ETP × EP must divide the TP·CP·DP ranks of a stage;
// the expert layout has no CP axis (expert-DP spans the dense CP and DP). The Mesh hands
// out EP (the token dispatch), ExpertTP (splits each expert's hidden size), ExpertTPEP,
// ExpertDP (expert gradient reduction and the distributed optimizer's sharding of
// expert parameters) and ExpertMP (their gradient norm). With EP = 1 and ETP = TP they
// have the members of TP, TP, DPCP and MP: a dense model on an expert mesh is unchanged.
//
// # Invariants
//
// Groups are values created by main and passed down; nothing here is package state, and
// a process may hold many worlds (tests build several meshes at once). Every rank of a
// group makes the same collective calls in the same order. On a group of size 1 every
// collective and mapping is the identity. The in-process transport combines
// contributions in rank order and the TCP ring in ring order, so both are bitwise
// reproducible from run to run.
//
// # Errors
//
// Sizes that do not divide (a gather into a buffer of the wrong size, a TP split of a dim
// not divisible by the group size) are caller bugs and panic with the op and shapes.
// Communication failures return an *Error naming the collective, the group, the rank and,
// when known, the peer at fault; after an error a Comm must not be used again, except
// AllToAllV's mismatched counts, which every rank reports before any data moves. The
// mappings run inside autograd, where no error can be returned: they panic with the
// *Error, and training entry points recover it and abort the job so peers fail fast.
//
// # Shapes
//
// Activations are [B, T, C]. TP mappings split and join the last dim (C or a per-rank
// slice of it, C/tp); SP mappings split and join dim 1 (T, T/tp per rank).
package parallel
