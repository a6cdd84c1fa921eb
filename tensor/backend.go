package tensor

import (
	"fmt"
	"sort"
	"sync"
)

// Buffer is storage owned by a backend. Only the backend that allocated it knows what is
// inside; everything else moves data through the backend's WriteHost and ReadHost.
type Buffer any

// A Span is what a kernel sees of a tensor: Numel() elements of DType starting at element
// Off of Buf, laid out contiguously in row-major order with the given Shape.
type Span struct {
	Buf   Buffer
	Off   int
	DType DType
	Shape Shape
}

// Numel returns the number of elements of the span.
func (s Span) Numel() int { return s.Shape.Numel() }

// Empty reports whether the span stands for an absent optional operand.
func (s Span) Empty() bool { return s.Buf == nil }

// UnaryOp selects an elementwise function for Backend.Unary.
type UnaryOp uint8

// Elementwise functions. P is the scalar parameter passed with the op.
const (
	OpNeg       UnaryOp = iota + 1 // -x
	OpExp                          // e^x
	OpLog                          // ln x
	OpSqrt                         // √x
	OpTanh                         // tanh x
	OpGeLUTanh                     // 0.5x(1+tanh(√(2/π)(x+0.044715x³)))
	OpGeLUErf                      // 0.5x(1+erf(x/√2))
	OpSiLU                         // x·σ(x)
	OpReLU                         // max(x, 0)
	OpAddScalar                    // x + P
	OpMulScalar                    // x · P
	OpPowScalar                    // x^P
	OpSigmoid                      // σ(x) = 1/(1+e^-x)
)

// BinaryOp selects an elementwise function of two broadcast operands for Backend.Binary.
type BinaryOp uint8

// Elementwise functions of two operands.
const (
	OpAdd BinaryOp = iota + 1
	OpSub
	OpMul
	OpDiv
)

// ReduceOp selects a reduction along one dim for Backend.Reduce.
type ReduceOp uint8

// Reductions.
const (
	ReduceSum ReduceOp = iota + 1
	ReduceMean
)

// Dist selects the distribution drawn by Backend.Random.
type Dist uint8

// Distributions. A and B are RandomParams' parameters.
const (
	DistUniform   Dist = iota + 1 // uniform on [A, B)
	DistNormal                    // normal with mean A and standard deviation B
	DistBernoulli                 // 1 with probability A, else 0
	DistDropout                   // 0 with probability A, else 1/(1-A)
)

// RandomParams describes a draw from the layout-independent generator: the values of the
// elements of the region of a full tensor that starts at Start and has the destination's
// shape. See RNG for how each element's random bits are derived.
type RandomParams struct {
	Key   [2]uint32 // Philox key, from RNG
	Dist  Dist
	A, B  float64
	Full  Shape // shape of the whole (unsharded) tensor
	Start []int // first index of the region along each dim of Full
}

// MatMulParams describes a batched matrix multiply dst[i] = op(a[i]) · op(b[i]) for
// i < Batch, where op transposes when Trans is set. op(a) is M×K and op(b) is K×N; batch i
// of a starts at element i·StrideA of a (StrideA 0 repeats one matrix), likewise b;
// dst is Batch×M×N, contiguous. When Accumulate is set the product is added to dst.
type MatMulParams struct {
	Batch, M, N, K   int
	TransA, TransB   bool
	StrideA, StrideB int
	Accumulate       bool
}

// SoftmaxParams describes a softmax over the last dim of x: y = softmax(Scale·x) where
// masked positions count as −∞. Causal masks key j of query i (the second-to-last dim,
// Tq, and last dim, Tk) when j > i + Tk − Tq. A masked row is all zeros (or −∞ for Log).
type SoftmaxParams struct {
	Scale  float64
	Causal bool
	Log    bool // log-softmax
}

// CrossEntropyParams describes cross entropy of logits [N, V] against int targets [N].
type CrossEntropyParams struct {
	IgnoreIndex    int64 // rows whose target equals it get loss 0 and no gradient ...
	Ignore         bool  // ... when Ignore is set
	LabelSmoothing float64
}

// VocabCrossEntropyParams describes the vocabulary-parallel cross entropy kernels. This
// rank's logits [N, W] are the columns [Start, Start+W) of the global logits, whose first
// Vocab columns are the classes and the rest padding (excluded from the softmax, zero
// gradient); targets [N] (I32 or I64) are global class ids.
type VocabCrossEntropyParams struct {
	Start, Vocab   int
	IgnoreIndex    int64 // rows whose target equals it get loss 0 and no gradient ...
	Ignore         bool  // ... when Ignore is set
	LabelSmoothing float64
}

// OptimSegment is a run of elements [Off, Off+N) of the spans an optimizer kernel updates
// that share one learning rate and weight decay (one parameter, or the part of it in a
// shard). Elements outside every segment are left as they are.
type OptimSegment struct {
	Off, N          int
	LR, WeightDecay float64
}

// AdamParams describes one step of Backend.AdamStep: PyTorch's torch.optim.Adam (L2
// weight decay added to the gradient) or, when Decoupled, torch.optim.AdamW (decay applied
// to the parameter), with PyTorch's bias correction.
type AdamParams struct {
	Beta1, Beta2, Eps float64
	// BiasCorrection1 and BiasCorrection2 are 1−β1^t and 1−β2^t at step t (1-based).
	BiasCorrection1, BiasCorrection2 float64
	Decoupled                        bool
	// GradScale multiplies each gradient element before it is used: 1/loss scale, the
	// clipping coefficient, or both.
	GradScale float64
}

// SGDParams describes one step of Backend.SGDStep: PyTorch's torch.optim.SGD.
type SGDParams struct {
	Momentum, Dampening float64
	Nesterov            bool
	// First marks the first step, on which the momentum buffer is set to the gradient.
	First     bool
	GradScale float64 // as in AdamParams
}

// Backend is the set of kernels a device implements. The CPU backend implements all of
// them; GPU backends register themselves with Register. Every Span passed to a kernel is
// contiguous; shapes have been checked by the caller, so a backend may panic on a mismatch.
// Unless a method says otherwise, inputs and outputs have the same dtype, outputs do not
// overlap inputs except where noted, and dim indices are non-negative.
//
// Device errors panic. A backend may queue kernels and return before they have run (a
// GPU's stream); a device error such a kernel meets (a failed launch, an index out of
// range found by a kernel, a lost device) cannot be returned by the method that queued it,
// since the methods return nothing. An asynchronous backend reports it at the next Sync or
// host copy (ReadHost, WriteHost) by panicking with an error value whose message is the
// device's, and training entry points (package train) recover such panics into errors.
// Caller bugs panic too, with a message naming the op.
type Backend interface {
	// Name returns the name the backend is registered under ("cpu", "cuda").
	Name() string
	// Sync waits until every kernel the backend has queued has finished. It panics with
	// the device's error when one happened since the last Sync or host copy (see the
	// panic-on-device-error contract above). Backends that run each kernel before
	// returning (the CPU backend) implement it as a no-op.
	Sync()

	// Alloc returns storage for n elements of dtype dt; the contents are undefined.
	Alloc(dt DType, n int) Buffer
	// Free gives back storage that will not be used again.
	Free(b Buffer)
	// WriteHost copies host bytes (little-endian elements of dst.DType) into dst.
	WriteHost(dst Span, src []byte)
	// ReadHost copies dst's elements into host bytes.
	ReadHost(src Span, dst []byte)
	// Copy2D copies rows rows of cols elements: row r of src starts at src.Off+r·srcStride,
	// of dst at dst.Off+r·dstStride. The spans' shapes are ignored.
	Copy2D(dst Span, dstStride int, src Span, srcStride int, rows, cols int)
	// Fill sets every element of dst to v.
	Fill(dst Span, v float64)
	// Arange sets element i of dst to start + i·step.
	Arange(dst Span, start, step float64)
	// Cast converts src's elements to dst's dtype, rounding to nearest even.
	Cast(dst, src Span)
	// Permute sets dst so that dst's dim i is src's dim perm[i].
	Permute(dst, src Span, perm []int)
	// Random fills dst from the counter-based generator.
	Random(dst Span, p RandomParams)

	// Unary sets dst = op(x) elementwise; dst may be x.
	Unary(op UnaryOp, dst, x Span, p float64)
	// UnaryBackward sets dx = dy · op'(x); y = op(x) is passed for ops that use it.
	UnaryBackward(op UnaryOp, dx, x, y, dy Span, p float64)
	// Binary sets dst = op(a, b) where a and b broadcast to dst's shape; dst may be a or b.
	Binary(op BinaryOp, dst, a, b Span)
	// Where sets dst = cond ≠ 0 ? a : b, all three broadcast to dst's shape.
	Where(dst, cond, a, b Span)
	// Reduce reduces src along dim into dst, whose shape is src's with dim removed.
	Reduce(op ReduceOp, dst, src Span, dim int)
	// Max sets dst to the maximum of src along dim and idx (I64) to its first position.
	Max(dst, idx, src Span, dim int)
	// Gather sets dst[..i..] = src[..idx[..i..]..] along dim; idx (I32 or I64) has dst's
	// shape, and src's shape differs from it only at dim.
	Gather(dst, src, idx Span, dim int)
	// ScatterAdd adds src[..i..] to dst[..idx[..i..]..] along dim: Gather's adjoint.
	ScatterAdd(dst, src, idx Span, dim int)
	// MatMul computes a batched matrix product.
	MatMul(dst, a, b Span, p MatMulParams)

	// Softmax sets y = softmax over the last dim of x; mask, if not empty, broadcasts to
	// x's shape and masks where it is non-zero.
	Softmax(y, x, mask Span, p SoftmaxParams)
	// SoftmaxBackward sets dx from the output y and its gradient dy.
	SoftmaxBackward(dx, y, dy Span, p SoftmaxParams)
	// LayerNorm normalizes rows of x (last dim C) and writes per-row mean and rstd
	// (F32 or F64); w and b of shape [C] may be empty.
	LayerNorm(y, mean, rstd, x, w, b Span, eps float64)
	// LayerNormBackward writes dx and, when not empty, dw and db.
	LayerNormBackward(dx, dw, db, dy, x, w, mean, rstd Span)
	// RMSNorm sets y = x·rstd·w with rstd = 1/√(mean(x²)+eps) per row; w may be empty.
	RMSNorm(y, rstd, x, w Span, eps float64)
	// RMSNormBackward writes dx and, when not empty, dw.
	RMSNormBackward(dx, dw, dy, x, w, rstd Span)
	// Embedding sets dst[i] = w[ids[i]] for weight w [V, C].
	Embedding(dst, w, ids Span)
	// EmbeddingBackward adds dy[i] into dw[ids[i]].
	EmbeddingBackward(dw, dy, ids Span)
	// CrossEntropy writes each row's loss and log-sum-exp (both [N]).
	CrossEntropy(loss, lse, logits, targets Span, p CrossEntropyParams)
	// CrossEntropyBackward sets dlogits from the per-row loss gradient dloss [N].
	CrossEntropyBackward(dlogits, logits, targets, lse, dloss Span, p CrossEntropyParams)

	// VocabCrossEntropyStats writes each row's statistics over this rank's class columns
	// (those below p.Vocab) into stats (F64 [4, N]): row 0 the largest logit m (−Inf when
	// the rank holds no class), row 1 Σ e^(x−m), row 2 the target's logit when this rank
	// holds the target (else 0), row 3 Σ x. Ignored rows get zeros. Ranks combine them
	// into the global statistics by a MAX of row 0 (M), rescaling row 1 by e^(m−M), and a
	// SUM of rows 1-3. It panics if a target is outside [0, p.Vocab) and not ignored.
	VocabCrossEntropyStats(stats, logits, targets Span, p VocabCrossEntropyParams)
	// VocabCrossEntropyLoss sets loss[r] (N, any float dtype) from the global statistics
	// [4, N] (M, S, target logit x_t, Σ x): M + ln S − (1−ε)·x_t − ε·Σx/Vocab with ε the
	// label smoothing, 0 for ignored rows.
	VocabCrossEntropyLoss(loss, stats, targets Span, p VocabCrossEntropyParams)
	// VocabCrossEntropyBackward sets dlogits [N, W] = dloss[r]·(e^(x−M)/S − ε/Vocab −
	// (1−ε)·[column is the target]) on class columns, 0 on padding columns and ignored
	// rows, from the global statistics [4, N] and dloss [N] (any float dtype). dlogits may
	// be logits itself (the gradient written over the logits).
	VocabCrossEntropyBackward(dlogits, logits, targets, stats, dloss Span, p VocabCrossEntropyParams)

	// AdamStep updates, in one pass over each segment, param and the moments m and v
	// (one dtype, F32 or F64) from grad (any float dtype, read as grad·p.GradScale), with
	// lr and weight decay from the segment:
	//   g = grad·GradScale (+ wd·param unless Decoupled); param ·= 1 − lr·wd if Decoupled
	//   m = β1·m + (1−β1)·g;  v = β2·v + (1−β2)·g²
	//   param −= lr/BiasCorrection1 · m / (√v/√BiasCorrection2 + ε)
	// When model is not empty it receives param rounded to model's dtype (the
	// low-precision copy of fp32 master weights). All spans have the same element count.
	AdamStep(p AdamParams, segs []OptimSegment, param, grad, m, v, model Span)
	// SGDStep updates param (F32 or F64) from grad (any float dtype) and, when
	// p.Momentum ≠ 0, the momentum buffer buf (param's dtype; may be empty otherwise):
	//   g = grad·GradScale + wd·param
	//   buf = g on the first step, else Momentum·buf + (1−Dampening)·g
	//   d = g + Momentum·buf if Nesterov, else buf (g without momentum)
	//   param −= lr·d
	// model is as in AdamStep.
	SGDStep(p SGDParams, segs []OptimSegment, param, grad, buf, model Span)
	// SumSquares sets dst[i] (F64, one element per range) to the sum of x[j]² over
	// ranges[i] = [lo, hi), accumulated in float64: the squared L2 norm of each range, not
	// finite when one of its elements is not. x may be any float dtype.
	SumSquares(dst, x Span, ranges [][2]int)
	// AccumulateGrad adds grad (any float dtype), converted to main's dtype (F32 or F64),
	// into main and sets grad to zero: fp32 accumulation of low-precision gradients.
	AccumulateGrad(main, grad Span)

	AttentionKernels // fused scaled dot-product attention (fused_attention.go)
	RowKernels       // the kernels of the row-wise fused ops (fused_rows.go)
}

// Poisoner is implemented by backends that can overwrite storage that was returned to the
// pool, so a stale read through the backend shows garbage instead of plausible values.
// Devices poison in test binaries only (testing.Testing), where the cost of writing every
// released buffer buys early detection of stale reads; programs skip it.
type Poisoner interface {
	Poison(b Buffer, dt DType, n int)
}

var (
	registryMu sync.Mutex
	registry   = map[string]func() (Backend, error){}
)

// Register makes a backend available under name, the way database/sql drivers register.
// It is called from a backend package's init. It panics if name is registered twice.
func Register(name string, open func() (Backend, error)) {
	registryMu.Lock()
	defer registryMu.Unlock()
	if _, dup := registry[name]; dup {
		panic("tensor: Register called twice for backend " + name)
	}
	registry[name] = open
}

// Backends returns the names of the registered backends, sorted.
func Backends() []string {
	registryMu.Lock()
	defer registryMu.Unlock()
	names := make([]string, 0, len(registry))
	for n := range registry {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Open returns a new device on the backend registered under name. Each device has its own
// memory pool, scopes and gradient mode.
func Open(name string) (*Device, error) {
	registryMu.Lock()
	open, ok := registry[name]
	registryMu.Unlock()
	if !ok {
		return nil, fmt.Errorf("tensor: no backend %q (registered: %v)", name, Backends())
	}
	b, err := open()
	if err != nil {
		return nil, fmt.Errorf("tensor: open backend %q: %w", name, err)
	}
	return NewDevice(b), nil
}
