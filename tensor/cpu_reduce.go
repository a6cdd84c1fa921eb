package tensor

import "fmt"

func (cpuBackend) Reduce(op ReduceOp, dst, src Span, dim int) {
	if computeIs64(dst.DType) {
		reduceKernel[float64](op, dst, src, dim)
	} else {
		reduceKernel[float32](op, dst, src, dim)
	}
}

// reduceKernel sums along dim in float64, whatever T, then rounds once. Each output
// element's sum runs over k in increasing order, so the result does not depend on how the
// work is split: by outer index when there are several (rows of a [B, T, C] reduced over
// T), else by ranges of inner columns (a bias gradient: [N, C] reduced over N).
func reduceKernel[T float](op ReduceOp, dst, src Span, dim int) {
	outer, n, inner := src.Shape.Split3(dim)
	xs, ds := load[T](src), output[T](dst)
	sum := func(o, lo, hi int, acc []float64) {
		clear(acc)
		base := o * n * inner
		for k := 0; k < n; k++ {
			addColumns(acc, xs[base+k*inner+lo:base+k*inner+hi])
		}
		for i, a := range acc {
			if op == ReduceMean {
				a /= float64(n)
			}
			ds[o*inner+lo+i] = T(a)
		}
	}
	grain := max(1, reduceGrain/max(1, n*inner))
	if outer > 1 {
		parallelFor(outer, grain, func(lo, hi int) {
			acc := make([]float64, inner)
			for o := lo; o < hi; o++ {
				sum(o, 0, inner, acc)
			}
		})
	} else {
		parallelFor(inner, max(1, reduceGrain/max(1, n)), func(lo, hi int) {
			sum(0, lo, hi, make([]float64, hi-lo))
		})
	}
	store(dst, ds)
}

// reduceGrain is the number of elements read below which a reduction is not split across
// goroutines.
const reduceGrain = 1 << 16

func (cpuBackend) Max(dst, idx, src Span, dim int) {
	if computeIs64(dst.DType) {
		maxKernel[float64](dst, idx, src, dim)
	} else {
		maxKernel[float32](dst, idx, src, dim)
	}
}

func maxKernel[T float](dst, idx, src Span, dim int) {
	outer, n, inner := src.Shape.Split3(dim)
	if n == 0 {
		panic(fmt.Sprintf("tensor: Max: empty dim %d of %v", dim, src.Shape))
	}
	xs, ds := load[T](src), output[T](dst)
	is := raw[int64](idx)
	for o := 0; o < outer; o++ {
		for i := 0; i < inner; i++ {
			base := o*n*inner + i
			best, at := xs[base], 0
			for k := 1; k < n; k++ {
				if v := xs[base+k*inner]; v > best || (v != v && best == best) {
					best, at = v, k // NaN wins, as in PyTorch
				}
			}
			ds[o*inner+i], is[o*inner+i] = best, int64(at)
		}
	}
	store(dst, ds)
}

// gatherWalk calls fn(dstIndex, srcIndex) for every element of a dst/idx of shape dshape,
// gathering along dim from a src whose size at dim is n.
func gatherWalk(dshape Shape, idx []int, dim, n int, op string, fn func(di, si int)) {
	outer, m, inner := dshape.Split3(dim)
	for o := 0; o < outer; o++ {
		for k := 0; k < m; k++ {
			for i := 0; i < inner; i++ {
				di := (o*m+k)*inner + i
				j := idx[di]
				if j < 0 || j >= n {
					panic(fmt.Sprintf("tensor: %s: index %d out of range [0, %d) at position %d", op, j, n, di))
				}
				fn(di, (o*n+j)*inner+i)
			}
		}
	}
}

func (cpuBackend) Gather(dst, src, idx Span, dim int) {
	if computeIs64(dst.DType) {
		gatherKernel[float64](dst, src, idx, dim)
	} else {
		gatherKernel[float32](dst, src, idx, dim)
	}
}

func gatherKernel[T float](dst, src, idx Span, dim int) {
	xs, ds := load[T](src), output[T](dst)
	gatherWalk(dst.Shape, indices(idx), dim, src.Shape[dim], "Gather", func(di, si int) { ds[di] = xs[si] })
	store(dst, ds)
}

func (cpuBackend) ScatterAdd(dst, src, idx Span, dim int) {
	if computeIs64(dst.DType) {
		scatterAddKernel[float64](dst, src, idx, dim)
	} else {
		scatterAddKernel[float32](dst, src, idx, dim)
	}
}

func scatterAddKernel[T float](dst, src, idx Span, dim int) {
	ds, xs := load[T](dst), load[T](src)
	gatherWalk(src.Shape, indices(idx), dim, dst.Shape[dim], "ScatterAdd", func(si, di int) { ds[di] += xs[si] })
	store(dst, ds)
}
