package tensor

import (
	"fmt"
	"math"
	"sort"
)

// Optimizer kernels of the CPU backend: the fused Adam/AdamW and SGD updates, per-range
// sums of squares and fp32 gradient accumulation. Each walks its spans once, in chunks of
// optimChunk elements so that a converted operand (a bf16 gradient widened to float32)
// stays in L1 cache between being read and being used; ranges of at least optimGrain
// elements are split across goroutines. Every element is computed the same way whatever
// the split, so results do not depend on GOMAXPROCS.

const (
	optimChunk = 2048
	optimGrain = 1 << 15
	sumBlock   = 1 << 12 // SumSquares adds fixed blocks, then the blocks in order
	// optimItem is the most elements of one item that forSegments's goroutines pull.
	// parallelFor's 4 items per goroutine are 15M elements each in a 124M-parameter
	// step, 5 ms of AdamW: the goroutine that takes the last one then ran alone for
	// 1-5 ms. Items of 1M elements end within a third of a millisecond of each other.
	optimItem = 1 << 20
)

// subSpan returns elements [lo, hi) of s as a 1-D span.
func subSpan(s Span, lo, hi int) Span {
	return Span{Buf: s.Buf, Off: s.Off + lo, DType: s.DType, Shape: Shape{hi - lo}}
}

// loadRange returns elements [lo, hi) of s in compute type T: the storage itself when s
// has dtype T, else a conversion into *scratch (grown as needed).
func loadRange[T float](s Span, lo, hi int, scratch *[]T) []T {
	var z T
	_, is64 := any(z).(float64)
	if (is64 && s.DType == F64) || (!is64 && s.DType == F32) {
		return raw[T](s)[lo:hi]
	}
	if cap(*scratch) < hi-lo {
		*scratch = make([]T, hi-lo)
	}
	v := (*scratch)[:hi-lo]
	switch s.DType {
	case F64:
		for i, x := range raw[float64](s)[lo:hi] {
			v[i] = T(x)
		}
	case F32:
		for i, x := range raw[float32](s)[lo:hi] {
			v[i] = T(x)
		}
	case BF16:
		for i, x := range raw[BFloat16](s)[lo:hi] {
			v[i] = T(x.Float32())
		}
	case F16:
		for i, x := range raw[Float16](s)[lo:hi] {
			v[i] = T(x.Float32())
		}
	default:
		panic(fmt.Sprintf("tensor: cpu: %v is not a float dtype", s.DType))
	}
	return v
}

// storeRange writes v, rounded to s's dtype (nearest even), to elements [lo, lo+len(v)).
func storeRange[T float](s Span, lo int, v []T) {
	var z T
	_, is64 := any(z).(float64)
	hi := lo + len(v)
	switch s.DType {
	case F64:
		d := raw[float64](s)[lo:hi]
		for i, x := range v {
			d[i] = float64(x)
		}
	case F32:
		d := raw[float32](s)[lo:hi]
		for i, x := range v {
			d[i] = float32(x)
		}
	case BF16:
		d := raw[BFloat16](s)[lo:hi]
		for i, x := range v {
			if is64 {
				d[i] = BF16FromFloat64(float64(x))
			} else {
				d[i] = BF16FromFloat32(float32(x))
			}
		}
	case F16:
		d := raw[Float16](s)[lo:hi]
		for i, x := range v {
			if is64 {
				d[i] = F16FromFloat64(float64(x))
			} else {
				d[i] = F16FromFloat32(float32(x))
			}
		}
	default:
		panic(fmt.Sprintf("tensor: cpu: %v is not a float dtype", s.DType))
	}
}

// checkOptim panics unless param is F32 or F64, the state spans share its dtype, every
// non-empty span has its element count and the segments lie inside it.
func checkOptim(op string, segs []OptimSegment, param, grad Span, state ...Span) {
	if param.DType != F32 && param.DType != F64 {
		panic(fmt.Sprintf("tensor: %s: param dtype %v, want float32 or float64", op, param.DType))
	}
	n := param.Numel()
	if grad.Numel() != n || !grad.DType.IsFloat() {
		panic(fmt.Sprintf("tensor: %s: grad %v %v for param of %d elements", op, grad.DType, grad.Shape, n))
	}
	for _, s := range state {
		if !s.Empty() && (s.Numel() != n || s.DType != param.DType) {
			panic(fmt.Sprintf("tensor: %s: state %v %v for param %v of %d elements", op, s.DType, s.Shape, param.DType, n))
		}
	}
	for _, sg := range segs {
		if sg.Off < 0 || sg.N < 0 || sg.Off+sg.N > n {
			panic(fmt.Sprintf("tensor: %s: segment [%d, %d) outside %d elements", op, sg.Off, sg.Off+sg.N, n))
		}
	}
}

// forSegments calls body(si, a, b) on consecutive chunks [a, b) of at most optimChunk
// elements covering every segment si, splitting the segments' elements together across
// goroutines when there are many: one fork for the whole call, however many segments (a
// model has a few per layer, each a fork of its own before, which woke the other CPUs
// a hundred times per step).
func forSegments(segs []OptimSegment, body func(si, a, b int)) {
	starts := make([]int, len(segs)+1) // segment si covers [starts[si], starts[si+1]) of the walk
	for i, sg := range segs {
		starts[i+1] = starts[i] + sg.N
	}
	parallelForAtMost(starts[len(segs)], optimGrain, optimItem, func(lo, hi int) {
		for si := sort.SearchInts(starts, lo+1) - 1; si < len(segs) && starts[si] < hi; si++ {
			from, to := max(lo, starts[si]), min(hi, starts[si+1])
			for c := from; c < to; c += optimChunk {
				off := segs[si].Off - starts[si]
				body(si, off+c, off+min(c+optimChunk, to))
			}
		}
	})
}

func (cpuBackend) AdamStep(p AdamParams, segs []OptimSegment, param, grad, m, v, model Span) {
	checkOptim("AdamStep", segs, param, grad, m, v)
	if m.Empty() || v.Empty() || (!model.Empty() && model.Numel() != param.Numel()) {
		panic(fmt.Sprintf("tensor: AdamStep: need moments and a model span of %d elements", param.Numel()))
	}
	if param.DType == F64 {
		adamStep[float64](p, segs, param, grad, m, v, model)
	} else {
		adamStep[float32](p, segs, param, grad, m, v, model)
	}
}

// adamConsts holds one segment's scalars in compute type T, each rounded once from
// float64 as PyTorch rounds its Python-float scalars.
type adamConsts[T float] struct {
	scale, l2, decay, b1, c1, b2, c2, stepSize, invBC2Sqrt, eps T
}

func adamStep[T float](p AdamParams, segs []OptimSegment, param, grad, m, v, model Span) {
	ps, ms, vs := raw[T](param), raw[T](m), raw[T](v)
	ks := make([]adamConsts[T], len(segs))
	for i, sg := range segs {
		k := adamConsts[T]{scale: T(p.GradScale), decay: 1, b1: T(p.Beta1), c1: T(1 - p.Beta1),
			b2: T(p.Beta2), c2: T(1 - p.Beta2), stepSize: T(sg.LR / p.BiasCorrection1),
			invBC2Sqrt: T(1 / math.Sqrt(p.BiasCorrection2)), eps: T(p.Eps)}
		if p.Decoupled {
			k.decay = T(1 - sg.LR*sg.WeightDecay)
		} else {
			k.l2 = T(sg.WeightDecay)
		}
		ks[i] = k
	}
	forSegments(segs, func(si, a, b int) {
		var scratch []T
		adamKernel(ps[a:b], loadRange(grad, a, b, &scratch), ms[a:b], vs[a:b], &ks[si])
		if !model.Empty() {
			storeRange(model, a, ps[a:b])
		}
	})
}

// adamKernel is the update of one chunk, in PyTorch's order of operations except that
// √v/√BiasCorrection2 multiplies by the reciprocal (a square root and one division per
// element are what bound the loop). Adam has decay 1 and AdamW has l2 0, so one loop
// serves both.
func adamKernel[T float](ps, gs, ms, vs []T, k *adamConsts[T]) {
	if p32, ok := any(ps).([]float32); ok && hasVMathAVX512 && len(ps) >= 16 {
		done := len(ps) &^ 15
		k32 := any(k).(*adamConsts[float32])
		g32, m32, v32 := any(gs).([]float32), any(ms).([]float32), any(vs).([]float32)
		adamF32AVX512(p32[:done], g32[:done], m32[:done], v32[:done], k32)
		ps, gs, ms, vs = ps[done:], gs[done:], ms[done:], vs[done:]
	}
	adamKernelGo(ps, gs, ms, vs, k)
}

// adamKernelGo is adamKernel's portable loop, the reference the assembly is tested against.
func adamKernelGo[T float](ps, gs, ms, vs []T, k *adamConsts[T]) {
	n := len(ps)
	gs, ms, vs = gs[:n], ms[:n], vs[:n]
	for i := range ps {
		g := gs[i]*k.scale + k.l2*ps[i]
		mi := k.b1*ms[i] + k.c1*g
		vi := k.b2*vs[i] + k.c2*(g*g)
		ms[i], vs[i] = mi, vi
		denom := T(math.Sqrt(float64(vi)))*k.invBC2Sqrt + k.eps
		ps[i] = ps[i]*k.decay - k.stepSize*(mi/denom)
	}
}

func (cpuBackend) SGDStep(p SGDParams, segs []OptimSegment, param, grad, buf, model Span) {
	checkOptim("SGDStep", segs, param, grad, buf)
	if (p.Momentum != 0 && buf.Empty()) || (!model.Empty() && model.Numel() != param.Numel()) {
		panic(fmt.Sprintf("tensor: SGDStep: need a momentum buffer and a model span of %d elements", param.Numel()))
	}
	if param.DType == F64 {
		sgdStep[float64](p, segs, param, grad, buf, model)
	} else {
		sgdStep[float32](p, segs, param, grad, buf, model)
	}
}

func sgdStep[T float](p SGDParams, segs []OptimSegment, param, grad, buf, model Span) {
	ps := raw[T](param)
	var bs []T
	if p.Momentum != 0 {
		bs = raw[T](buf)
	}
	mu, damp, scale := T(p.Momentum), T(1-p.Dampening), T(p.GradScale)
	forSegments(segs, func(si, a, b int) {
		lr, wd := T(segs[si].LR), T(segs[si].WeightDecay)
		var scratch []T
		gs := loadRange(grad, a, b, &scratch)
		pc := ps[a:b]
		gs = gs[:len(pc)]
		for i := range pc {
			g := gs[i]*scale + wd*pc[i]
			d := g
			if bs != nil {
				bi := g
				if !p.First {
					bi = mu*bs[a+i] + damp*g
				}
				bs[a+i] = bi
				d = bi
				if p.Nesterov {
					d = g + mu*bi
				}
			}
			pc[i] -= lr * d
		}
		if !model.Empty() {
			storeRange(model, a, pc)
		}
	})
}

func (cpuBackend) SumSquares(dst, x Span, ranges [][2]int) {
	if dst.DType != F64 || dst.Numel() != len(ranges) {
		panic(fmt.Sprintf("tensor: SumSquares: dst %v %v for %d ranges, want float64", dst.DType, dst.Shape, len(ranges)))
	}
	type block struct{ r, lo, hi int }
	var blocks []block
	for r, rg := range ranges {
		if rg[0] < 0 || rg[1] < rg[0] || rg[1] > x.Numel() {
			panic(fmt.Sprintf("tensor: SumSquares: range %v outside %d elements", rg, x.Numel()))
		}
		for lo := rg[0]; lo < rg[1]; lo += sumBlock {
			blocks = append(blocks, block{r, lo, min(lo+sumBlock, rg[1])})
		}
	}
	part := make([]float64, len(blocks))
	parallelFor(len(blocks), optimGrain/sumBlock, func(lo, hi int) {
		var s32 []float32
		var s64 []float64
		for i := lo; i < hi; i++ {
			b := blocks[i]
			if x.DType == F32 && hasVMathAVX512 && i+4 <= hi {
				xs, four := raw[float32](x), [4][]float32{}
				for j := range four {
					four[j] = xs[blocks[i+j].lo:blocks[i+j].hi]
				}
				if len(four[1]) == len(four[0]) && len(four[2]) == len(four[0]) && len(four[3]) == len(four[0]) {
					sumSquares4(part[i:i+4], four) // all but a range's last block are sumBlock long
					i += 3
					continue
				}
			}
			if x.DType == F64 {
				part[i] = sumSquares(loadRange(x, b.lo, b.hi, &s64))
			} else {
				part[i] = sumSquares(loadRange(x, b.lo, b.hi, &s32))
			}
		}
	})
	out := raw[float64](dst)
	clear(out)
	for i, b := range blocks {
		out[b.r] += part[i]
	}
}

// sumSquares adds x² in float64 with four interleaved accumulators, a fixed order.
func sumSquares[T float](xs []T) float64 { return sumSquaresFrom(xs, 0, [4]float64{}) }

// sumSquaresFrom is sumSquares continued from element i (a multiple of 4) with the
// accumulators s that its main loop holds there.
func sumSquaresFrom[T float](xs []T, i int, s [4]float64) float64 {
	s0, s1, s2, s3 := s[0], s[1], s[2], s[3]
	for ; i+4 <= len(xs); i += 4 {
		a, b, c, d := float64(xs[i]), float64(xs[i+1]), float64(xs[i+2]), float64(xs[i+3])
		s0 += a * a
		s1 += b * b
		s2 += c * c
		s3 += d * d
	}
	for ; i < len(xs); i++ {
		a := float64(xs[i])
		s0 += a * a
	}
	return (s0 + s1) + (s2 + s3)
}

// sumSquares4 sets dst[i] = sumSquares(xs[i]) for four slices of one length, whose main
// loops run together in sumSquares4F32AVX512, bit for bit sumSquares's.
func sumSquares4(dst []float64, xs [4][]float32) {
	n := len(xs[0]) &^ 3
	var acc [16]float64
	if n > 0 {
		sumSquares4F32AVX512(&xs[0][0], &xs[1][0], &xs[2][0], &xs[3][0], n, &acc)
	}
	for i, x := range xs {
		dst[i] = sumSquaresFrom(x, n, [4]float64(acc[4*i:4*i+4]))
	}
}

func (cpuBackend) AccumulateGrad(main, grad Span) {
	if (main.DType != F32 && main.DType != F64) || !grad.DType.IsFloat() || main.Numel() != grad.Numel() {
		panic(fmt.Sprintf("tensor: AccumulateGrad: main %v %v from grad %v %v", main.DType, main.Shape, grad.DType, grad.Shape))
	}
	if main.DType == F64 {
		accumulateGrad[float64](main, grad)
	} else {
		accumulateGrad[float32](main, grad)
	}
}

func accumulateGrad[T float](main, grad Span) {
	ms := raw[T](main)
	forSegments([]OptimSegment{{N: main.Numel()}}, func(_, a, b int) {
		var scratch []T
		gs := loadRange(grad, a, b, &scratch)
		d := ms[a:b]
		gs = gs[:len(d)]
		for i := range d {
			d[i] += gs[i]
		}
		clear(rawBytes(subSpan(grad, a, b))) // all-zero bytes are +0 in every float dtype
	})
}
