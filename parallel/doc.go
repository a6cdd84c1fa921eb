// Package parallel will hold megago's communication and parallel-schedule
// layer. It is planned and not yet implemented; this comment records what it
// will contain (see DESIGN.md).
//
//   - Comm: Rank, Size, AllReduce (sum, max, min, avg), AllGather,
//     ReduceScatter, Broadcast, Send/Recv, Barrier and sub-group creation.
//     Blocking calls take a context.Context; a timeout or a lost peer returns
//     an error naming the rank, group and collective. Every collective is the
//     identity on a group of size 1.
//   - Transports: in-process (RunLocal(n, fn) runs n goroutine ranks with a
//     deterministic reduction order, for tests and CPU experiments) and TCP
//     (rendezvous from torchrun's RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR
//     and MASTER_PORT, or Slurm's SLURM_PROCID and SLURM_NTASKS). The NCCL
//     transport lives in package cuda.
//   - Mesh: builds the TP, CP, PP and DP groups from a world Comm in
//     Megatron's rank order tp-cp-ep-dp-pp (TP fastest), by a pure function.
//   - Mappings, named after their forward with the backward stated beside
//     it: CopyToTP, ReduceFromTP, ScatterToTP, GatherFromTP, and the
//     sequence-parallel ScatterToSP, GatherFromSP, ReduceScatterToSP.
//   - Pipeline schedules (no pipelining, 1F1B, interleaved 1F1B) that take a
//     forward-step function and know nothing about the model.
//   - DDP gradient buckets reduced in reverse layer order, overlapping
//     backward where the transport allows.
//
// Package parallel works on tensors only; it never sees a layer or a Param.
// Groups are values created by main and passed down, never package state.
package parallel
