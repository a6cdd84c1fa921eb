// Package parallel is megago's communication layer: the Comm interface that every
// collective goes through, its transports, the Mesh that lays TP × CP × PP × DP ranks out
// in Megatron's order, and the tensor- and sequence-parallel mappings. It works on tensors
// only; it never sees a layer or a parameter.
//
// # Reading order
//
//   - comm.go: Comm (Rank, Size, AllReduce, AllGather, ReduceScatter, Broadcast, Send,
//     Recv, Barrier, Split), Op and Error.
//   - local.go: the in-process transport. RunLocal(n, fn) runs n goroutine ranks; tests
//     and CPU experiments use it.
//   - tcp*.go, env.go, frame*.go: the TCP transport for processes on one or many hosts,
//     configured from torchrun's or Slurm's environment (`megago launch` sets it).
//   - mesh*.go: Sizes, Coord and the pure rank arithmetic; Mesh builds every group.
//   - mappings.go: CopyToTP, ReduceFromTP, ScatterToTP, GatherFromTP, ScatterToSP,
//     GatherFromSP, ReduceScatterToSP, each named after its forward with its backward
//     beside it.
//
// Pipeline schedules and data-parallel gradient buckets are planned (they build on this).
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
// when known, the peer at fault; after an error a Comm must not be used again. The
// mappings run inside autograd, where no error can be returned: they panic with the
// *Error, and training entry points recover it and abort the job so peers fail fast.
//
// # Shapes
//
// Activations are [B, T, C]. TP mappings split and join the last dim (C or a per-rank
// slice of it, C/tp); SP mappings split and join dim 1 (T, T/tp per rank).
package parallel
