package cuda

import (
	"encoding/binary"
	"fmt"
	"math"

	"megago/cuda/internal/driver"
	"megago/tensor"
)

// Multi-tensor optimizer steps (internal/kernels/optim.cu): one launch per step over every
// segment, with the segment table uploaded first.

// segTable returns optim.cu's Seg array (off, n, lr, wd per segment, 32 bytes each)
// followed by prefix (nsegs+1 int64: the work index where each segment starts), and the
// total number of elements. Empty segments are left out.
func segTable(segs []tensor.OptimSegment) ([]byte, int, int64) {
	le := binary.LittleEndian
	var seg, prefix []byte
	var total int64
	n := 0
	for _, s := range segs {
		if s.N == 0 {
			continue
		}
		seg = le.AppendUint64(seg, uint64(s.Off))
		seg = le.AppendUint64(seg, uint64(s.N))
		seg = le.AppendUint64(seg, math.Float64bits(s.LR))
		seg = le.AppendUint64(seg, math.Float64bits(s.WeightDecay))
		prefix = le.AppendUint64(prefix, uint64(total))
		total += int64(s.N)
		n++
	}
	prefix = le.AppendUint64(prefix, uint64(total))
	return append(seg, prefix...), n, total
}

// checkOptim panics unless param is F32 or F64, the state spans share its dtype and
// size, and the segments lie inside it.
func checkOptim(op string, segs []tensor.OptimSegment, param, grad tensor.Span, state ...tensor.Span) {
	if param.DType != tensor.F32 && param.DType != tensor.F64 {
		panic(fmt.Sprintf("cuda: %s: param dtype %v, want float32 or float64", op, param.DType))
	}
	n := param.Numel()
	if grad.Numel() != n || !grad.DType.IsFloat() {
		panic(fmt.Sprintf("cuda: %s: grad %v %v for param of %d elements", op, grad.DType, grad.Shape, n))
	}
	for _, s := range state {
		if !s.Empty() && (s.Numel() != n || s.DType != param.DType) {
			panic(fmt.Sprintf("cuda: %s: state %v %v for param %v of %d elements", op, s.DType, s.Shape, param.DType, n))
		}
	}
	for _, sg := range segs {
		if sg.Off < 0 || sg.N < 0 || sg.Off+sg.N > n {
			panic(fmt.Sprintf("cuda: %s: segment [%d, %d) outside %d elements", op, sg.Off, sg.Off+sg.N, n))
		}
	}
}

// uploadSegs uploads the segment table and returns the Seg array, the prefix array and
// the block to give back.
func (b *Backend) uploadSegs(segs []tensor.OptimSegment) (seg, prefix driver.DevicePtr, nsegs int, total int64) {
	tab, nsegs, total := segTable(segs)
	p, err := b.alloc.get(int64(len(tab)))
	b.must(err)
	b.must(b.dev.htod(p, tab))
	return p, p + driver.DevicePtr(32*nsegs), nsegs, total
}

// modelArgs appends the optional model copy and its dtype.
func (b *Backend) modelArgs(a *driver.KernelArgs, op string, model tensor.Span) *driver.KernelArgs {
	dt := int32(0)
	if !model.Empty() {
		dt = dtArg(model.DType)
	}
	return a.Ptr(b.ptr(op, model)).I32(dt)
}

// AdamStep runs one Adam or AdamW step over every segment.
func (b *Backend) AdamStep(p tensor.AdamParams, segs []tensor.OptimSegment, param, grad, m, v, model tensor.Span) {
	checkOptim("AdamStep", segs, param, grad, m, v)
	if m.Empty() || v.Empty() || (!model.Empty() && model.Numel() != param.Numel()) {
		panic(fmt.Sprintf("cuda: AdamStep: need moments and a model span of %d elements", param.Numel()))
	}
	release := b.dev.bind()
	defer release()
	seg, prefix, nsegs, total := b.uploadSegs(segs)
	defer b.alloc.put(seg)
	const op = "AdamStep"
	a := driver.NewKernelArgs().Ptr(b.ptr(op, param)).Ptr(b.ptr(op, grad)).I32(dtArg(grad.DType)).Ptr(b.ptr(op, m)).Ptr(b.ptr(op, v))
	a = b.modelArgs(a, op, model).Ptr(seg).Ptr(prefix).I32(int32(nsegs)).I64(total).
		F64(p.Beta1).F64(p.Beta2).F64(p.Eps).F64(p.BiasCorrection1).F64(p.BiasCorrection2).F64(p.GradScale).
		I32(boolArg(p.Decoupled))
	b.run("optim", "adam"+computeSuffix(param.DType), total, a)
}

// SGDStep runs one SGD step over every segment.
func (b *Backend) SGDStep(p tensor.SGDParams, segs []tensor.OptimSegment, param, grad, buf, model tensor.Span) {
	checkOptim("SGDStep", segs, param, grad, buf)
	if (p.Momentum != 0 && buf.Empty()) || (!model.Empty() && model.Numel() != param.Numel()) {
		panic(fmt.Sprintf("cuda: SGDStep: need a momentum buffer and a model span of %d elements", param.Numel()))
	}
	release := b.dev.bind()
	defer release()
	seg, prefix, nsegs, total := b.uploadSegs(segs)
	defer b.alloc.put(seg)
	const op = "SGDStep"
	bufp := driver.DevicePtr(0)
	if p.Momentum != 0 {
		bufp = b.ptr(op, buf)
	}
	a := driver.NewKernelArgs().Ptr(b.ptr(op, param)).Ptr(b.ptr(op, grad)).I32(dtArg(grad.DType)).Ptr(bufp)
	a = b.modelArgs(a, op, model).Ptr(seg).Ptr(prefix).I32(int32(nsegs)).I64(total).
		F64(p.Momentum).F64(p.Dampening).I32(boolArg(p.Nesterov)).I32(boolArg(p.First)).F64(p.GradScale)
	b.run("optim", "sgd"+computeSuffix(param.DType), total, a)
}
