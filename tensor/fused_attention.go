package tensor

import (
	"fmt"
	"math"
)

// Fused scaled dot-product attention: Attention, its options, the kernels every backend
// implements for it (AttentionKernels), and the unfused composition that defines its
// result (AttentionReference).
//
// Shapes: q [B, NH, Tq, HS]; k and v [B, G, Tk, HS] with G key/value heads, each serving
// NH/G consecutive query heads (grouped-query attention; G = NH is multi-head attention);
// the scores and probabilities, never stored by the fused kernels, are [B, NH, Tq, Tk].

// AttentionOptions configures Attention and AttentionReference. The zero value is
// softmax(q·kᵀ/√HS)·v over every key, without bias or dropout.
type AttentionOptions struct {
	// Scale multiplies q·kᵀ; 0 means 1/√HS (T5, which does not scale, passes 1).
	Scale float64
	// Causal hides key j from query i when j > i + Tk − Tq, so the last query of a longer
	// key sequence (a KV cache's past followed by the new tokens) sees every key.
	Causal bool
	// Mask, if not nil, broadcasts to the scores [B, NH, Tq, Tk] and is non-zero where
	// attention is not allowed (padding: [B, 1, 1, Tk]). Any dtype.
	Mask *Tensor
	// Segments, if not nil, are the keys' document (segment) ids [B, Tk], I32: key j is
	// hidden from query i when Segments[b, j] ≠ Segments[b, i + Tk − Tq] (the queries are
	// the last Tq keys, as for Causal), so that sequences packing several documents do not
	// attend across them (Megatron's --reset-attention-mask, with Causal). See
	// SegmentMask for the same mask as a tensor.
	Segments *Tensor
	// Bias, if not nil, is added to the scaled scores: the logits are Scale·q·kᵀ + Bias.
	// It has q's dtype, broadcasts to [B, NH, Tq, Tk] (T5's relative position bias is
	// [1, NH, Tq, Tk]) and may require grad: its gradient is summed over the dims it is
	// broadcast along.
	Bias *Tensor
	// Dropout is the probability with which each attention probability is zeroed (the
	// others are scaled by 1/(1−Dropout)), the mask drawn from RNG exactly as
	// DropoutRegion(probs, Dropout, RNG, DropoutFull, DropoutStart) draws it.
	Dropout float64
	RNG     RNG
	// DropoutFull and DropoutStart locate this call's probabilities [B, NH, Tq, Tk] in the
	// full probability tensor (all micro-batches, all heads of every tensor-parallel rank)
	// whose element indices the dropout mask is drawn at. Nil means this call's
	// probabilities are the whole tensor.
	DropoutFull  Shape
	DropoutStart []int
}

// AttentionParams describes the attention kernels' computation. Spans and shapes are in
// AttentionArgs.
type AttentionParams struct {
	Scale   float64 // multiplies q·kᵀ (resolved: never 0)
	Causal  bool    // key j hidden from query i when j > i + Tk − Tq
	Dropout float64 // probability of zeroing a probability; 0 for none
	Key     [2]uint32
	// Full and Start place the kernel's probabilities [B, NH, Tq, Tk] in the full
	// probability tensor (rank 4) whose element indices the dropout mask is drawn at
	// (RandomParams' Full and Start for DistDropout with A = Dropout).
	Full  Shape
	Start []int
}

// AttentionArgs are the tensors of the attention kernels.
type AttentionArgs struct {
	Q    Span // [B, NH, Tq, HS]
	K, V Span // [B, G, Tk, HS], NH a multiple of G
	// Mask (any dtype; non-zero masks) and Bias (Q's dtype, added to the scaled scores)
	// broadcast to [B, NH, Tq, Tk]; either may be empty.
	Mask, Bias Span
	// Segments (I32 [B, Tk]; may be empty) hides key j from query i of batch b when
	// Segments[b, j] ≠ Segments[b, i + Tk − Tq] (AttentionOptions.Segments).
	Segments Span
	Out      Span // [B, NH, Tq, HS]: the forward's output, the backward's input
	LSE      Span // [B, NH, Tq] in Q.DType.Compute(): log-sum-exp of each row's logits
}

// AttentionGrads are the gradients of AttentionKernels.AttentionBackward: DOut and DLSE
// come in, the others go out.
type AttentionGrads struct {
	DOut       Span // [B, NH, Tq, HS]
	DLSE       Span // [B, NH, Tq] in LSE's dtype; empty counts as zeros
	DQ, DK, DV Span // Q's, K's and V's shapes and dtype
	DBias      Span // Bias's shape and dtype, summed over its broadcast dims; empty: not wanted
	// Scratch is memory of Q's compute type that the backward may use as it likes, of
	// the size an AttentionScratcher asks for (from the device's pool); empty: none.
	Scratch Span
}

// AttentionScratcher is implemented by a backend whose attention backward needs scratch
// memory: Attention's backward then takes it from the device's pool (AttentionGrads.Scratch)
// rather than the kernel allocating it on every call.
type AttentionScratcher interface {
	// AttentionBackwardScratch returns how many elements of Q's compute type the backward
	// of a with g's operands uses as scratch (0: none).
	AttentionBackwardScratch(a AttentionArgs, g AttentionGrads, p AttentionParams) int
}

// AttentionKernels are the fused attention kernels of a Backend.
type AttentionKernels interface {
	// Attention sets a.Out = P·V and a.LSE, where the logits are X = Scale·Q·Kᵀ + Bias
	// with masked keys (Mask, Causal, Segments) at −∞, L = logsumexp(X) per row, and P = e^(X−L)
	// after dropout. Each key/value head serves NH/G consecutive query heads. A row with
	// every key masked has L = −∞ and output 0. The kernel may not hold a [Tq, Tk]
	// matrix per head.
	Attention(a AttentionArgs, p AttentionParams)
	// AttentionBackward sets g.DQ, g.DK, g.DV and, when not empty, g.DBias from g.DOut
	// and g.DLSE, recomputing the probabilities from a (with the forward's Out and LSE).
	// Results must not depend on the number of threads.
	AttentionBackward(a AttentionArgs, g AttentionGrads, p AttentionParams)
}

// Attention returns scaled dot-product attention of q [B, NH, Tq, HS] over keys and
// values k, v [B, G, Tk, HS] (NH a multiple of G): out [B, NH, Tq, HS] and the log-sum-exp
// of each query's logits, lse [B, NH, Tq], in q.DType().Compute() (F32 for F32, BF16 and
// F16; F64 for F64). The logits are Scale·q·kᵀ + Bias with masked keys excluded; a query
// that sees no key has lse −∞ and output 0. Its value is AttentionReference's, computed by
// one fused kernel per pass that never stores the [Tq, Tk] scores of a head (the CPU
// backend's is a tiled online softmax; see cpu_attention.go). Gradients flow to q, k, v,
// Bias and through lse (∂lse/∂logits is the softmax, as for combining attention blocks).
//
// It panics if q, k, v are not rank 4 with those shapes, of one float dtype on one device,
// if Mask or Bias does not broadcast to [B, NH, Tq, Tk] or Bias's dtype is not q's, if
// Segments is not I32 [B, Tk] on q's device or Tq > Tk with Segments, if
// Dropout is outside [0, 1), or if the dropout region is not inside DropoutFull.
func Attention(q, k, v *Tensor, o AttentionOptions) (out, lse *Tensor) {
	p := checkAttention("Attention", q, k, v, o)
	dev := q.Device()
	dev.countFused(FusedAttention)
	out = empty(dev, q.dtype, q.shape)
	lse = empty(dev, q.dtype.Compute(), q.shape[:3])
	a := attentionArgs(q, k, v, o, out, lse)
	dev.backend.Attention(a, p)
	record("Attention", []*Tensor{out, lse}, []*Tensor{q, k, v, o.Bias}, func(gys []*Tensor) []*Tensor {
		dq, dk, dv, db := attentionGrads(q, k, v, o, p, out, lse, gys[0], gys[1], dev.backend.AttentionBackward)
		return []*Tensor{dq, dk, dv, db}
	})
	return out, lse
}

// AttentionBackward returns the gradients of q, k and v [B, NH, Tq, HS], [B, G, Tk, HS]
// for the output gradient dout [B, NH, Tq, HS] of the attention whose output and
// log-sum-exp are out [B, NH, Tq, HS] and lse [B, NH, Tq] (lse in q's compute dtype): the
// backward of Attention(q, k, v, o) when out and lse are that call's, run by the fused
// kernel without recording anything. out and lse may instead be those of a larger
// attention whose keys include k's (ring attention's combined output and global
// log-sum-exp): the probabilities recomputed from lse are then the larger attention's
// restricted to k's keys, and the results the contributions of k and v to its gradients
// (and q's through them). o.Bias, if any, gets no gradient.
//
// It panics where Attention does, or if out, lse or dout does not have its shape on q's
// device.
func AttentionBackward(q, k, v, out, lse, dout *Tensor, o AttentionOptions) (dq, dk, dv *Tensor) {
	p := checkAttention("AttentionBackward", q, k, v, o)
	for _, x := range []struct {
		name  string
		t     *Tensor
		dt    DType
		shape Shape
	}{{"out", out, q.dtype, q.shape}, {"lse", lse, q.dtype.Compute(), q.shape[:3]}, {"dout", dout, q.dtype, q.shape}} {
		if x.t.Device() != q.Device() || x.t.dtype != x.dt || !x.t.shape.Equal(x.shape) {
			panic(fmt.Sprintf("tensor: AttentionBackward: %s %v %v on %v for q %v %v: want %v %v on q's device",
				x.name, x.t.dtype, x.t.shape, x.t.Device(), q.dtype, q.shape, x.dt, x.shape))
		}
	}
	o.Bias = nil
	dq, dk, dv, _ = attentionGrads(q, k, v, o, p, out, lse, dout, nil, q.Device().backend.AttentionBackward)
	return dq, dk, dv
}

// attentionGrads runs the attention backward kernel (the backend's
// AttentionBackward, or AttentionMergedBackward for out and dout [B, Tq, NH·HS]): the
// gradients of q, k, v and, when it requires grad, o.Bias, for dout and dlse (nil:
// zeros), given the forward's out and lse.
func attentionGrads(q, k, v *Tensor, o AttentionOptions, p AttentionParams, out, lse, dout, dlse *Tensor,
	kernel func(AttentionArgs, AttentionGrads, AttentionParams)) (dq, dk, dv, db *Tensor) {
	dev := q.Device()
	a := attentionArgs(q, k, v, o, out, lse)
	g := AttentionGrads{DOut: dout.Span(), DLSE: spanOrEmpty(dlse)}
	dq, dk, dv = empty(dev, q.dtype, q.shape), empty(dev, k.dtype, k.shape), empty(dev, v.dtype, v.shape)
	g.DQ, g.DK, g.DV = dq.Span(), dk.Span(), dv.Span()
	if needsGrad(o.Bias) {
		db = empty(dev, o.Bias.dtype, o.Bias.shape)
		g.DBias = db.Span()
	}
	if s, ok := dev.backend.(AttentionScratcher); ok {
		if n := s.AttentionBackwardScratch(a, g, p); n > 0 {
			scratch := empty(dev, q.dtype.Compute(), Shape{n})
			defer scratch.Release()
			g.Scratch = scratch.Span()
		}
	}
	kernel(a, g, p)
	return dq, dk, dv, db
}

// attentionArgs returns the kernels' tensors of Attention's operands and results.
func attentionArgs(q, k, v *Tensor, o AttentionOptions, out, lse *Tensor) AttentionArgs {
	return AttentionArgs{Q: q.Span(), K: k.Span(), V: v.Span(), Mask: spanOrEmpty(o.Mask), Bias: spanOrEmpty(o.Bias),
		Segments: spanOrEmpty(o.Segments), Out: out.Span(), LSE: lse.Span()}
}

// checkAttention checks Attention's operands and returns the kernels' parameters.
func checkAttention(op string, q, k, v *Tensor, o AttentionOptions) AttentionParams {
	bad := func(why string) {
		panic(fmt.Sprintf("tensor: %s: q %v %v, k %v %v, v %v %v: %s", op, q.dtype, q.shape, k.dtype, k.shape, v.dtype, v.shape, why))
	}
	if q.Rank() != 4 || k.Rank() != 4 || v.Rank() != 4 {
		bad("want q [B, NH, Tq, HS], k and v [B, G, Tk, HS]")
	}
	checkSame(op, q, k)
	checkSame(op, q, v)
	if !q.dtype.IsFloat() {
		bad("not a float dtype")
	}
	if !k.shape.Equal(v.shape) || k.shape[0] != q.shape[0] || k.shape[3] != q.shape[3] {
		bad("shapes differ")
	}
	if g := k.shape[1]; g == 0 || q.shape[1]%g != 0 {
		bad("query heads not a multiple of key/value heads")
	}
	scores := Shape{q.shape[0], q.shape[1], q.shape[2], k.shape[2]}
	for _, x := range []struct {
		name string
		t    *Tensor
	}{{"mask", o.Mask}, {"bias", o.Bias}} {
		if x.t == nil {
			continue
		}
		if x.t.Device() != q.Device() {
			panic(fmt.Sprintf("tensor: %s: %s on %v, q on %v", op, x.name, x.t.Device(), q.Device()))
		}
		if b, ok := Broadcast(x.t.shape, scores); !ok || !b.Equal(scores) {
			panic(fmt.Sprintf("tensor: %s: %s %v does not broadcast to the scores %v", op, x.name, x.t.shape, scores))
		}
	}
	if o.Segments != nil {
		checkSegments(op, o.Segments, q, k)
	}
	if o.Bias != nil && o.Bias.dtype != q.dtype {
		panic(fmt.Sprintf("tensor: %s: bias %v %v for q %v %v: dtypes differ", op, o.Bias.dtype, o.Bias.shape, q.dtype, q.shape))
	}
	if o.Dropout < 0 || o.Dropout >= 1 || math.IsNaN(o.Dropout) {
		panic(fmt.Sprintf("tensor: %s: dropout probability %v outside [0, 1)", op, o.Dropout))
	}
	p := AttentionParams{Scale: o.Scale, Causal: o.Causal, Dropout: o.Dropout, Key: o.RNG.key}
	if p.Scale == 0 {
		p.Scale = 1 / math.Sqrt(float64(q.shape[3]))
	}
	if o.Dropout > 0 {
		p.Full, p.Start = o.DropoutFull.Clone(), append([]int(nil), o.DropoutStart...)
		if p.Full == nil {
			p.Full = scores.Clone()
		}
		if p.Start == nil {
			p.Start = make([]int, len(p.Full))
		}
		Region{Full: p.Full, Start: p.Start, Size: scores}.check(op + " dropout")
	}
	return p
}
