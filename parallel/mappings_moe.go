package parallel

import (
	"context"
	"fmt"

	"megago/tensor"
)

// The mappings of mixture-of-experts token dispatch, as differentiable functions over
// rows (dim 0) of token matrices [N, ...] whose row counts may differ from rank to rank.
// As in mappings.go each is named after its forward, states its backward, returns its
// input on a group of size 1, and panics with the *Error if communication fails.

// AllToAllRows (Megatron's all_to_all) — forward: sends sendRows[r] rows of x to rank r,
// in rank order, and returns the rows received, recvRows[r] from rank r in rank order
// ([Σ recvRows, ...]); backward: the reverse all-to-all of the gradient. recvRows[r] must
// be rank r's sendRows for this rank. It panics if the counts do not have one entry per
// rank or sendRows does not sum to x's rows.
func AllToAllRows(ctx context.Context, c Comm, x *tensor.Tensor, sendRows, recvRows []int) *tensor.Tensor {
	return apply1("AllToAllRows", c, x, func(x *tensor.Tensor) *tensor.Tensor { return allToAllRows(ctx, c, x, sendRows, recvRows) },
		func(g *tensor.Tensor) *tensor.Tensor { return allToAllRows(ctx, c, g, recvRows, sendRows) })
}

// GatherRowsV (Megatron's gather_from_sequence_parallel_region with output_split_sizes)
// — forward: all-gather dim 0, rank r contributing rows[r] rows, in rank order; backward:
// sum the gradient over the group and keep this rank's rows (ReduceScatterRowsV). It
// panics if x does not have rows[Rank()] rows.
func GatherRowsV(ctx context.Context, c Comm, x *tensor.Tensor, rows []int) *tensor.Tensor {
	return apply1("GatherRowsV", c, x, func(x *tensor.Tensor) *tensor.Tensor { return gatherRowsV(ctx, c, x, rows) },
		func(g *tensor.Tensor) *tensor.Tensor { return reduceScatterRowsV(ctx, c, g, rows) })
}

// ReduceScatterRowsV (Megatron's reduce_scatter_to_sequence_parallel_region with
// input_split_sizes) — forward: sum x [Σ rows, ...] over the group and keep this rank's
// rows[Rank()] rows (rank r's run starts at the sum of rows[:r]); backward: all-gather
// the gradient (GatherRowsV). It panics if x does not have Σ rows rows.
func ReduceScatterRowsV(ctx context.Context, c Comm, x *tensor.Tensor, rows []int) *tensor.Tensor {
	return apply1("ReduceScatterRowsV", c, x, func(x *tensor.Tensor) *tensor.Tensor { return reduceScatterRowsV(ctx, c, x, rows) },
		func(g *tensor.Tensor) *tensor.Tensor { return gatherRowsV(ctx, c, g, rows) })
}

// rowShape returns x's shape with dim 0 set to n.
func rowShape(x *tensor.Tensor, n int) []int { return append([]int{n}, x.Shape()[1:]...) }

func allToAllRows(ctx context.Context, c Comm, x *tensor.Tensor, sendRows, recvRows []int) *tensor.Tensor {
	w := 1
	for _, d := range x.Shape()[1:] {
		w *= d
	}
	out := tensor.Empty(x.Device(), x.DType(), rowShape(x, sumRows(recvRows))...)
	must(c.AllToAllV(ctx, out, x.Detach(), scaled(sendRows, w), scaled(recvRows, w)))
	return out
}

func gatherRowsV(ctx context.Context, c Comm, x *tensor.Tensor, rows []int) *tensor.Tensor {
	checkRows("GatherRowsV", c, x, rows[c.Rank()], rows)
	most := maxRows(rows)
	if most == 0 {
		return x.Detach()
	}
	padded := padRows(x.Detach(), most)                                                       // [most, ...]
	all := tensor.Empty(x.Device(), x.DType(), append([]int{c.Size()}, padded.Shape()...)...) // [n, most, ...]
	must(c.AllGather(ctx, all, padded))
	parts := make([]*tensor.Tensor, 0, c.Size())
	for r, n := range rows {
		if n > 0 {
			parts = append(parts, all.Narrow(0, r, 1).Squeeze(0).Narrow(0, 0, n))
		}
	}
	return tensor.Concat(0, parts...)
}

func reduceScatterRowsV(ctx context.Context, c Comm, x *tensor.Tensor, rows []int) *tensor.Tensor {
	checkRows("ReduceScatterRowsV", c, x, sumRows(rows), rows)
	most := maxRows(rows)
	if most == 0 {
		return x.Detach()
	}
	blocks := make([]*tensor.Tensor, c.Size()) // rank r's rows padded to most, block r
	off := 0
	for r, n := range rows {
		blocks[r] = padRows(x.Detach().Narrow(0, off, n), most)
		off += n
	}
	out := tensor.Empty(x.Device(), x.DType(), blocks[0].Shape()...) // [most, ...]
	must(c.ReduceScatter(ctx, out, tensor.Concat(0, blocks...), Sum))
	return out.Narrow(0, 0, rows[c.Rank()])
}

// padRows returns x with zero rows appended up to n rows.
func padRows(x *tensor.Tensor, n int) *tensor.Tensor {
	switch x.Dim(0) {
	case n:
		return x
	case 0:
		return tensor.Zeros(x.Device(), x.DType(), rowShape(x, n)...)
	}
	return tensor.Concat(0, x, tensor.Zeros(x.Device(), x.DType(), rowShape(x, n-x.Dim(0))...))
}

func checkRows(op string, c Comm, x *tensor.Tensor, want int, rows []int) {
	if len(rows) != c.Size() || x.Rank() < 1 || x.Dim(0) != want {
		panic(fmt.Sprintf("parallel: %s on group %s: x %v for rows %v", op, c.Name(), x.Shape(), rows))
	}
}

func sumRows(rows []int) int {
	s := 0
	for _, n := range rows {
		s += n
	}
	return s
}

func maxRows(rows []int) int {
	m := 0
	for _, n := range rows {
		m = max(m, n)
	}
	return m
}

// scaled returns rows multiplied by w (row counts as element counts).
func scaled(rows []int, w int) []int {
	out := make([]int, len(rows))
	for i, n := range rows {
		out[i] = n * w
	}
	return out
}

// GatherFromSPNoReduce (Megatron's gather_from_sequence_parallel_region with
// tensor_parallel_output_grad=False) — forward: all-gather the sequence dim (dim 1 of
// [B, T/tp, ...]); backward: keep this rank's chunk of the gradient, which every rank
// holds whole (the gathered tensor feeds a computation replicated over the group). It
// panics if x has no sequence dim.
func GatherFromSPNoReduce(ctx context.Context, tp Comm, x *tensor.Tensor) *tensor.Tensor {
	checkSeq("GatherFromSPNoReduce", x)
	return apply1("GatherFromSPNoReduce", tp, x, func(x *tensor.Tensor) *tensor.Tensor { return gathered(ctx, tp, x, 1) },
		func(g *tensor.Tensor) *tensor.Tensor { return chunkOf("GatherFromSPNoReduce", tp, g, 1) })
}
