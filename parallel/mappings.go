package parallel

import (
	"context"
	"fmt"

	"megago/tensor"
)

// The tensor-parallel and sequence-parallel mappings, as differentiable functions. Each is
// named after its forward; its backward is stated beside it. On a group of size 1 each
// returns its input. Tensors are [B, T, C]: the TP mappings split or join the last dim, the
// SP mappings dim 1 (T). The context is kept for the backward pass. If communication fails
// a mapping panics with the *Error; training entry points recover it and abort the job.

// CopyToTP (Megatron's f) — forward: identity; backward: all-reduce sum of the gradient
// over the TP group. Put it before a column-parallel layer.
func CopyToTP(ctx context.Context, tp Comm, x *tensor.Tensor) *tensor.Tensor {
	return apply1("CopyToTP", tp, x, func(x *tensor.Tensor) *tensor.Tensor { return x.Detach() },
		func(g *tensor.Tensor) *tensor.Tensor { return allReduced(ctx, tp, g) })
}

// ReduceFromTP (Megatron's g) — forward: all-reduce sum over the TP group; backward:
// identity. Put it after a row-parallel layer.
func ReduceFromTP(ctx context.Context, tp Comm, x *tensor.Tensor) *tensor.Tensor {
	return apply1("ReduceFromTP", tp, x, func(x *tensor.Tensor) *tensor.Tensor { return allReduced(ctx, tp, x) },
		func(g *tensor.Tensor) *tensor.Tensor { return g })
}

// ScatterToTP — forward: keep this rank's chunk of the last dim; backward: all-gather the
// last dim. It panics if the last dim is not divisible by the group size.
func ScatterToTP(ctx context.Context, tp Comm, x *tensor.Tensor) *tensor.Tensor {
	d := x.Rank() - 1
	return apply1("ScatterToTP", tp, x, func(x *tensor.Tensor) *tensor.Tensor { return chunkOf("ScatterToTP", tp, x, d) },
		func(g *tensor.Tensor) *tensor.Tensor { return gathered(ctx, tp, g, d) })
}

// GatherFromTP — forward: all-gather the last dim; backward: keep this rank's chunk of the
// last dim.
func GatherFromTP(ctx context.Context, tp Comm, x *tensor.Tensor) *tensor.Tensor {
	d := x.Rank() - 1
	return apply1("GatherFromTP", tp, x, func(x *tensor.Tensor) *tensor.Tensor { return gathered(ctx, tp, x, d) },
		func(g *tensor.Tensor) *tensor.Tensor { return chunkOf("GatherFromTP", tp, g, d) })
}

// ScatterToSP — forward: keep this rank's chunk of the sequence dim (dim 1 of [B, T, C]);
// backward: all-gather the sequence dim. It panics if T is not divisible by the group size.
func ScatterToSP(ctx context.Context, tp Comm, x *tensor.Tensor) *tensor.Tensor {
	checkSeq("ScatterToSP", x)
	return apply1("ScatterToSP", tp, x, func(x *tensor.Tensor) *tensor.Tensor { return chunkOf("ScatterToSP", tp, x, 1) },
		func(g *tensor.Tensor) *tensor.Tensor { return gathered(ctx, tp, g, 1) })
}

// GatherFromSP — forward: all-gather the sequence dim; backward: reduce-scatter (sum) the
// sequence dim. Put it before a column-parallel layer under sequence parallelism.
func GatherFromSP(ctx context.Context, tp Comm, x *tensor.Tensor) *tensor.Tensor {
	checkSeq("GatherFromSP", x)
	return apply1("GatherFromSP", tp, x, func(x *tensor.Tensor) *tensor.Tensor { return gathered(ctx, tp, x, 1) },
		func(g *tensor.Tensor) *tensor.Tensor { return reduceScattered(ctx, tp, g, 1) })
}

// ReduceScatterToSP — forward: reduce-scatter (sum) the sequence dim; backward: all-gather
// the sequence dim. Put it after a row-parallel layer under sequence parallelism. It
// panics if T is not divisible by the group size.
func ReduceScatterToSP(ctx context.Context, tp Comm, x *tensor.Tensor) *tensor.Tensor {
	checkSeq("ReduceScatterToSP", x)
	return apply1("ReduceScatterToSP", tp, x, func(x *tensor.Tensor) *tensor.Tensor { return reduceScattered(ctx, tp, x, 1) },
		func(g *tensor.Tensor) *tensor.Tensor { return gathered(ctx, tp, g, 1) })
}

func checkSeq(op string, x *tensor.Tensor) {
	if x.Rank() < 2 {
		panic(fmt.Sprintf("parallel: %s: input %v has no sequence dim (want [B, T, ...])", op, x.Shape()))
	}
}

// mapping is a tensor.Function made of a forward and a backward on one tensor.
type mapping struct {
	forward, backward func(*tensor.Tensor) *tensor.Tensor
}

func (m mapping) Forward(in []*tensor.Tensor) []*tensor.Tensor {
	return []*tensor.Tensor{m.forward(in[0])}
}

func (m mapping) Backward(g []*tensor.Tensor) []*tensor.Tensor {
	return []*tensor.Tensor{m.backward(g[0])}
}

func apply1(name string, c Comm, x *tensor.Tensor, fwd, bwd func(*tensor.Tensor) *tensor.Tensor) *tensor.Tensor {
	if c.Size() == 1 {
		return x
	}
	return tensor.Apply(name, mapping{fwd, bwd}, x)[0]
}

// must panics with err when communication failed.
func must(err error) {
	if err != nil {
		panic(err)
	}
}

// allReduced returns the sum of x over c, leaving x as it is.
func allReduced(ctx context.Context, c Comm, x *tensor.Tensor) *tensor.Tensor {
	y := x.Detach().Clone()
	must(c.AllReduce(ctx, y, Sum))
	return y
}

// chunkOf returns this rank's chunk of dim d.
func chunkOf(op string, c Comm, x *tensor.Tensor, d int) *tensor.Tensor {
	n := x.Dim(d)
	if n%c.Size() != 0 {
		panic(fmt.Sprintf("parallel: %s: dim %d of %v (size %d) not divisible by group %s size %d", op, d, x.Shape(), n, c.Name(), c.Size()))
	}
	part := n / c.Size()
	return x.Narrow(d, c.Rank()*part, part)
}

// gathered returns the concatenation along dim d of every rank's x, in rank order.
func gathered(ctx context.Context, c Comm, x *tensor.Tensor, d int) *tensor.Tensor {
	n := c.Size()
	shape := append([]int{n}, x.Shape()...)
	all := tensor.Empty(x.Device(), x.DType(), shape...) // [n, ...x]
	must(c.AllGather(ctx, all, x))
	if d == 0 {
		return all.Reshape(append([]int{n * x.Dim(0)}, x.Shape()[1:]...)...)
	}
	parts := tensor.Chunk(all, n, 0)
	for i, p := range parts {
		parts[i] = p.Squeeze(0)
	}
	return tensor.Concat(d, parts...)
}

// reduceScattered sums x over c and returns this rank's chunk of dim d.
func reduceScattered(ctx context.Context, c Comm, x *tensor.Tensor, d int) *tensor.Tensor {
	n := c.Size()
	if x.Dim(d)%n != 0 {
		panic(fmt.Sprintf("parallel: reduce-scatter: dim %d of %v not divisible by group %s size %d", d, x.Shape(), c.Name(), n))
	}
	chunks := tensor.Chunk(x.Detach(), n, d) // rank r's part is chunk r
	stacked := tensor.Concat(0, chunks...)   // [n·x0, ...]: chunk r is block r
	out := tensor.Empty(x.Device(), x.DType(), chunks[0].Shape()...)
	must(c.ReduceScatter(ctx, out, stacked, Sum))
	return out
}
