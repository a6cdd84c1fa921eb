package parallel

import (
	"context"
	"fmt"

	"megago/tensor"
)

// The context-parallel mappings of attention's heads [B, H, S, HS] (S a sequence, HS the
// head size). Under context parallelism rank r of a group of c holds Megatron's
// load-balanced chunks of the sequence: cut into 2·c chunks of m = S/(2·c) positions, rank
// r holds chunks r and 2·c−1−r, in that order ([B, H, 2m, HS]). As in mappings.go each
// mapping is named after its forward, states its backward, returns its input on a group of
// size 1, and panics with the *Error if communication fails.

// AllToAllCPSeqToHeads (Ulysses' all-to-all before attention; Megatron's all_to_all_sp2hp
// on [B, H, S, HS]) — forward: x [B, H, S/c, HS], this rank's load-balanced chunks of S
// for all H heads, becomes [B, H/c, S, HS]: heads [r·H/c, (r+1)·H/c) at every position,
// the positions in sequence order 0..S−1; backward: AllToAllCPHeadsToSeq of the gradient.
// It panics if x is not rank 4, H is not divisible by c or S/c is odd.
func AllToAllCPSeqToHeads(ctx context.Context, c Comm, x *tensor.Tensor) *tensor.Tensor {
	checkCPHeads("AllToAllCPSeqToHeads", c, x, c.Size(), 2)
	return apply1("AllToAllCPSeqToHeads", c, x, func(x *tensor.Tensor) *tensor.Tensor { return seqToHeads(ctx, c, x) },
		func(g *tensor.Tensor) *tensor.Tensor { return headsToSeq(ctx, c, g) })
}

// AllToAllCPHeadsToSeq (Ulysses' all-to-all after attention; Megatron's
// all_to_all_hp2sp) — forward: the inverse of AllToAllCPSeqToHeads, x [B, H/c, S, HS]
// (heads [r·H/c, (r+1)·H/c), positions in order) becomes [B, H, S/c, HS], this rank's
// load-balanced chunks for all heads; backward: AllToAllCPSeqToHeads of the gradient. It
// panics if x is not rank 4 or S is not divisible by 2·c.
func AllToAllCPHeadsToSeq(ctx context.Context, c Comm, x *tensor.Tensor) *tensor.Tensor {
	checkCPHeads("AllToAllCPHeadsToSeq", c, x, 1, 2*c.Size())
	return apply1("AllToAllCPHeadsToSeq", c, x, func(x *tensor.Tensor) *tensor.Tensor { return headsToSeq(ctx, c, x) },
		func(g *tensor.Tensor) *tensor.Tensor { return seqToHeads(ctx, c, g) })
}

// GatherFromCP (the all-gather of keys and values of Megatron's --cp-comm-type
// all_gather) — forward: all-gather x [B, H, S/c, HS], each rank's load-balanced chunks,
// into [B, H, S, HS] in sequence order; backward: sum the gradient over the group and keep
// this rank's chunks (a reduce-scatter). It panics if x is not rank 4 or S/c is odd.
func GatherFromCP(ctx context.Context, c Comm, x *tensor.Tensor) *tensor.Tensor {
	checkCPHeads("GatherFromCP", c, x, 1, 2)
	return apply1("GatherFromCP", c, x, func(x *tensor.Tensor) *tensor.Tensor { return gatherCP(ctx, c, x) },
		func(g *tensor.Tensor) *tensor.Tensor { return reduceScatterCP(ctx, c, g) })
}

// checkCPHeads panics unless x is [B, H, S', HS] with H divisible by heads and S' by seq
// (any sizes on a group of one).
func checkCPHeads(op string, c Comm, x *tensor.Tensor, heads, seq int) {
	if c.Size() == 1 {
		heads, seq = 1, 1
	}
	if x.Rank() != 4 || x.Dim(1)%heads != 0 || x.Dim(2)%seq != 0 {
		panic(fmt.Sprintf("parallel: %s on group %s of %d: x %v is not [B, H, S, HS] with H divisible by %d and S by %d",
			op, c.Name(), c.Size(), x.Shape(), heads, seq))
	}
}

// seqToHeads sends rank q heads block q of x [B, H, 2m, HS] and joins what it receives,
// rank s's chunks s and 2c−1−s of this rank's heads, into [B, H/c, 2cm, HS].
func seqToHeads(ctx context.Context, c Comm, x *tensor.Tensor) *tensor.Tensor {
	n := c.Size()
	b, h, s, hs := x.Dim(0), x.Dim(1)/n, x.Dim(2), x.Dim(3)
	send := x.Detach().Reshape(b, n, h, s, hs).Permute(1, 0, 2, 3, 4) // [c, B, H/c, 2m, HS]: block q for rank q
	recv := allToAllBlocks(ctx, c, send)                              // [c, B, H/c, 2m, HS]: block s from rank s
	return inSeqOrder(recv)
}

// headsToSeq is seqToHeads' inverse: it sends rank q its chunks q and 2c−1−q of x
// [B, H/c, 2cm, HS] and joins the heads blocks it receives into [B, H, 2m, HS].
func headsToSeq(ctx context.Context, c Comm, x *tensor.Tensor) *tensor.Tensor {
	recv := allToAllBlocks(ctx, c, byRank(c.Size(), x.Detach())) // [c, B, H/c, 2m, HS]: block s from rank s
	n := c.Size()
	b, h, s, hs := recv.Dim(1), recv.Dim(2), recv.Dim(3), recv.Dim(4)
	return recv.Permute(1, 0, 2, 3, 4).Reshape(b, n*h, s, hs)
}

// gatherCP all-gathers x [B, H, 2m, HS] and joins every rank's chunks into
// [B, H, 2cm, HS].
func gatherCP(ctx context.Context, c Comm, x *tensor.Tensor) *tensor.Tensor {
	all := tensor.Empty(x.Device(), x.DType(), append([]int{c.Size()}, x.Shape()...)...) // [c, B, H, 2m, HS]
	must(c.AllGather(ctx, all, x.Detach()))
	return inSeqOrder(all)
}

// reduceScatterCP sums x [B, H, 2cm, HS] over the group and returns this rank's chunks
// [B, H, 2m, HS].
func reduceScatterCP(ctx context.Context, c Comm, x *tensor.Tensor) *tensor.Tensor {
	send := byRank(c.Size(), x.Detach()) // [c, B, H, 2m, HS]
	out := tensor.Empty(x.Device(), x.DType(), send.Shape()[1:]...)
	must(c.ReduceScatter(ctx, out, send, Sum))
	return out
}

// allToAllBlocks sends block q of send [c, ...] to rank q and returns the blocks received,
// block s from rank s ([c, ...]).
func allToAllBlocks(ctx context.Context, c Comm, send *tensor.Tensor) *tensor.Tensor {
	n := c.Size()
	recv := tensor.Empty(send.Device(), send.DType(), send.Shape()...)
	counts := make([]int, n)
	for q := range counts {
		counts[q] = send.Numel() / n
	}
	must(c.AllToAllV(ctx, recv, send, counts, counts))
	return recv
}

// inSeqOrder joins blocks [c, B, H, 2m, HS], block s holding chunks s and 2c−1−s, into the
// sequence [B, H, 2cm, HS].
func inSeqOrder(blocks *tensor.Tensor) *tensor.Tensor {
	n, m := blocks.Dim(0), blocks.Dim(3)/2
	chunks := make([]*tensor.Tensor, 2*n) // [B, H, m, HS] each
	for s := range n {
		block := blocks.Narrow(0, s, 1).Squeeze(0) // [B, H, 2m, HS]
		chunks[s], chunks[2*n-1-s] = block.Narrow(2, 0, m), block.Narrow(2, m, m)
	}
	return tensor.Concat(2, chunks...)
}

// byRank splits the sequence x [B, H, 2cm, HS] into the blocks [c, B, H, 2m, HS] of the c
// ranks, block q holding chunks q and 2c−1−q.
func byRank(n int, x *tensor.Tensor) *tensor.Tensor {
	m := x.Dim(2) / (2 * n)
	blocks := make([]*tensor.Tensor, n)
	for q := range n {
		blocks[q] = tensor.Concat(2, x.Narrow(2, q*m, m), x.Narrow(2, (2*n-1-q)*m, m)).Unsqueeze(0)
	}
	return tensor.Concat(0, blocks...)
}
