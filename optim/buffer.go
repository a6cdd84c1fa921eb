package optim

import (
	"fmt"
	"slices"

	"megago/nn/param"
	"megago/tensor"
)

// Megatron's padding (param_and_grad_buffer.py): a parameter starts at a multiple of 64
// elements (128-byte aligned for 16-bit types) and a bucket ends at a multiple of
// lcm(DP, 128), so every bucket splits into DP equal shards that start 256-byte aligned.
const (
	paramAlign  = 64
	bucketAlign = 128
)

// padParamStart rounds a parameter's start offset up to a multiple of 64 elements.
func padParamStart(i int) int { return roundUp(i, paramAlign) }

// padBucketEnd rounds a bucket's end offset up to a multiple of lcm(dp, 128).
func padBucketEnd(i, dp int) int { return roundUp(i, lcm(dp, bucketAlign)) }

func roundUp(i, m int) int { return (i + m - 1) / m * m }

func lcm(a, b int) int {
	x, y := a, b
	for y != 0 {
		x, y = y, x%y
	}
	return a / x * b
}

// BufferConfig says how NewBuffers lays parameters out.
type BufferConfig struct {
	// DP is the size of the data-parallel group the layout is padded for: bucket ends are
	// multiples of lcm(DP, 128). 0 means 1.
	DP int
	// ExpertDP is DP for the buffers of expert parameters (param.Param.Expert), which are
	// reduced over the expert-data-parallel group. 0 means DP.
	ExpertDP int
	// BucketSize closes a bucket once it holds at least this many elements (Megatron's
	// bucket_size); 0 puts all of a buffer's parameters in one bucket.
	BucketSize int
}

// Buffer holds the parameters of one dtype in contiguous storage, with their gradients,
// in Megatron's layout: the parameters in reverse order (the order backward produces their
// gradients), each starting at a multiple of 64 elements, grouped into buckets that end at
// multiples of lcm(DP, 128). Every parameter's tensor is a view of Params and its gradient
// a view of Grads, so backward accumulates straight into Grads and one collective on a
// bucket reduces the gradients of all its parameters. Padding elements are zero in Params
// and Grads and stay zero.
type Buffer struct {
	DType tensor.DType // the parameters' dtype
	// Expert is set on a buffer of expert parameters (param.Param.Expert): its gradients
	// are reduced over the expert-data-parallel group instead of the data-parallel one.
	Expert  bool
	Params  *tensor.Tensor // [N] the parameters
	Grads   *tensor.Tensor // [N] their gradients, in DType: where autograd accumulates
	Buckets []Bucket
	Entries []Entry // one per parameter, in layout order

	// MainGrads [N] is where gradients are reduced and read by the optimizer: Grads itself
	// for F32 and F64 parameters; for BF16 and F16 parameters a separate F32 buffer into
	// which AccumulateGrads adds Grads (fp32 gradient accumulation, as Megatron's
	// main_grad).
	MainGrads *tensor.Tensor

	index map[*param.Param]int // entry of each parameter
}

// Entry is one parameter's place in a Buffer: elements [Off, Off+Param.Numel()).
type Entry struct {
	Param  *param.Param
	Off    int
	Bucket int
}

// Bucket is a range [Start, End) of a Buffer reduced by one collective, with its
// parameters in layout order. End − Start is a multiple of lcm(DP, 128).
type Bucket struct {
	Start, End int
	Params     []*param.Param
}

// NewBuffers lays params out in one Buffer per dtype (in order of the dtypes' first
// appearance), the expert parameters (param.Param.Expert) in buffers of their own after
// the others (one per dtype, padded for cfg.ExpertDP), and makes each parameter's tensor
// and gradient views of it, copying the current values (and gradients, if any) in. Layers keep working unchanged: they reach
// their parameters through the *param.Param. Within a buffer the parameters come in reverse
// order, as in Megatron's DDP, and a parameter marked Shared (the second copy of a tied
// embedding) gets a bucket of its own, as Megatron gives one to the shared embedding.
//
// Call it outside any scope of the parameters' device: the buffers live as long as the
// parameters. It panics if params is empty, holds a parameter twice, or spans devices.
func NewBuffers(params []*param.Param, cfg BufferConfig) []*Buffer {
	if len(params) == 0 {
		panic("optim: NewBuffers: no parameters")
	}
	dp := max(cfg.DP, 1)
	edp := dp
	if cfg.ExpertDP > 0 {
		edp = cfg.ExpertDP
	}
	dev := params[0].Device()
	type class struct {
		expert bool
		dt     tensor.DType
	}
	var classes []class
	byClass := map[class][]*param.Param{}
	seen := map[*param.Param]bool{}
	for _, p := range params {
		if seen[p] {
			panic(fmt.Sprintf("optim: NewBuffers: parameter %s appears twice", p.Name))
		}
		seen[p] = true
		if p.Device() != dev {
			panic(fmt.Sprintf("optim: NewBuffers: parameter %s is on %v, %s on %v", p.Name, p.Device(), params[0].Name, dev))
		}
		c := class{p.Expert, p.DType()}
		if _, ok := byClass[c]; !ok {
			classes = append(classes, c)
		}
		byClass[c] = append(byClass[c], p)
	}
	// Dense buffers first, so a model without experts keeps its layout.
	slices.SortStableFunc(classes, func(a, b class) int { return cmpBool(a.expert, b.expert) })
	bufs := make([]*Buffer, len(classes))
	for i, c := range classes {
		ps := slices.Clone(byClass[c])
		slices.Reverse(ps)
		pad := dp
		if c.expert {
			pad = edp
		}
		bufs[i] = newBuffer(dev, c.dt, ps, pad, cfg.BucketSize)
		bufs[i].Expert = c.expert
	}
	return bufs
}

// layout assigns offsets and buckets to ps (already in layout order), following
// Megatron's _ParamAndGradBuffer: pad each start, close a bucket when it reaches
// bucketSize elements or at a Shared parameter, pad each bucket end.
func layout(ps []*param.Param, dp, bucketSize int) (entries []Entry, buckets []Bucket) {
	start, bucketStart := 0, 0
	var members []*param.Param
	closeBucket := func(end int) int {
		end = padBucketEnd(end, dp)
		buckets = append(buckets, Bucket{Start: bucketStart, End: end, Params: members})
		bucketStart, members = end, nil
		return end
	}
	end := 0
	for _, p := range ps {
		start = padParamStart(start)
		if p.Shared && len(members) > 0 {
			start = closeBucket(start) // the previous bucket ends where this one begins
		}
		end = start + p.Numel()
		entries = append(entries, Entry{Param: p, Off: start, Bucket: len(buckets)})
		members = append(members, p)
		if (bucketSize > 0 && end-bucketStart >= bucketSize) || p.Shared {
			start = closeBucket(end)
		} else {
			start = end
		}
	}
	if len(members) > 0 {
		closeBucket(end)
	}
	return entries, buckets
}

func newBuffer(dev *tensor.Device, dt tensor.DType, ps []*param.Param, dp, bucketSize int) *Buffer {
	entries, buckets := layout(ps, dp, bucketSize)
	n := buckets[len(buckets)-1].End
	b := &Buffer{DType: dt, Params: tensor.Zeros(dev, dt, n), Grads: tensor.Zeros(dev, dt, n),
		Buckets: buckets, Entries: entries, index: map[*param.Param]int{}}
	b.MainGrads = b.Grads
	if md := masterDType(dt); md != dt {
		b.MainGrads = tensor.Zeros(dev, md, n)
	}
	for i, e := range entries {
		p := e.Param
		b.index[p] = i
		view := b.view(b.Params, p)
		view.CopyFrom(p.Tensor)
		grad := b.view(b.Grads, p)
		if old := p.Grad(); old != nil {
			grad.CopyFrom(old)
		}
		view.SetRequiresGrad(p.RequiresGrad())
		view.SetGrad(grad)
		p.Tensor = view
	}
	return b
}

// cmpBool orders false before true.
func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case b:
		return -1
	}
	return 1
}

// masterDType is the dtype of master weights, optimizer state and main gradients for
// parameters of dtype dt: F64 for F64, F32 otherwise.
func masterDType(dt tensor.DType) tensor.DType {
	if dt == tensor.F64 {
		return tensor.F64
	}
	return tensor.F32
}

// view returns p's part of the flat tensor t (Params, Grads or MainGrads), shaped like p.
func (b *Buffer) view(t *tensor.Tensor, p *param.Param) *tensor.Tensor {
	e := b.Entries[b.index[p]]
	return t.Narrow(0, e.Off, p.Numel()).Reshape(p.Shape()...)
}

// Offset returns the offset of p's first element in the buffer and whether p is in it.
func (b *Buffer) Offset(p *param.Param) (int, bool) {
	i, ok := b.index[p]
	if !ok {
		return 0, false
	}
	return b.Entries[i].Off, true
}

// MainGrad returns p's main gradient (a view of MainGrads, shaped like p). It panics if p
// is not in the buffer.
func (b *Buffer) MainGrad(p *param.Param) *tensor.Tensor {
	if _, ok := b.index[p]; !ok {
		panic(fmt.Sprintf("optim: MainGrad: parameter %s is not in the %v buffer", p.Name, b.DType))
	}
	if b.MainGrads == b.Grads {
		p.Tensor.Grad() // writes the zeros ZeroGrad deferred
	}
	return b.view(b.MainGrads, p)
}

// String names the buffer in messages: its dtype, "expert F32" for expert parameters.
func (b *Buffer) String() string {
	if b.Expert {
		return "expert " + b.DType.String()
	}
	return b.DType.String()
}

// Size returns the buffer's element count, padding included.
func (b *Buffer) Size() int { return b.Params.Numel() }

// ZeroGrad sets Grads and MainGrads to zero. When they are one tensor (F32 and F64
// parameters) it does so without writing them: each parameter's gradient is marked zero
// (tensor.Tensor.ZeroGrad), so that backward stores the first gradient instead of adding
// it, and AccumulateGrads and MainGrad write the zeros of parameters that received none.
// Padding between parameters is zero from the start and never written.
func (b *Buffer) ZeroGrad() {
	if b.MainGrads == b.Grads {
		for _, e := range b.Entries {
			e.Param.Tensor.ZeroGrad()
		}
		return
	}
	be := b.Grads.Device().Backend()
	be.Fill(b.Grads.Span(), 0)
	be.Fill(b.MainGrads.Span(), 0)
}

// settle writes the zeros ZeroGrad deferred for the parameters of bucket i that received
// no gradient, so that the flat gradients can be read.
func (b *Buffer) settle(i int) {
	for _, p := range b.Buckets[i].Params {
		p.Tensor.Grad()
	}
}

// AccumulateGrads makes bucket i's main gradients final for this micro-batch: it adds
// its Grads into its MainGrads and zeroes them, so that gradients of several micro-batches
// accumulate in fp32, or, when MainGrads is Grads, writes the zeros ZeroGrad deferred for
// parameters that received no gradient.
func (b *Buffer) AccumulateGrads(i int) {
	if b.MainGrads == b.Grads {
		b.settle(i)
		return
	}
	bk := b.Buckets[i]
	n := bk.End - bk.Start
	b.Grads.Device().Backend().AccumulateGrad(b.MainGrads.Narrow(0, bk.Start, n).Span(), b.Grads.Narrow(0, bk.Start, n).Span())
}
