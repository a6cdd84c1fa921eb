package nn

import (
	"slices"
	"time"

	"megago/parallel"
	"megago/tensor"
)

// cpP2P is the "p2p" core, ring attention, as one differentiable function (cpRing, after
// Transformer Engine's AttnFuncWithCPAndKVP2P). In cp steps each rank's keys and values
// travel once around the CP group (parallel.Ring: block i+1's transfer runs while block
// i's attention computes). At step i a rank holds the block of rank (r−i) mod cp, attends
// each of its two query chunks to each visible key chunk of it (skipping invisible ones:
// under a causal mask a step attends half the queries to the whole block or all queries
// to half of it), and folds each partial output into its query chunk's running output by
// log-sum-exp (cpAccum). Forward keeps only q, the rank's own k and v, the combined output
// and the global log-sum-exp: every received block and partial is released as soon as it
// has been used, so a layer's activations are 1/cp of CP=1's. Backward passes the blocks
// around the ring again, each with the sum of its key/value gradients so far; every rank
// adds its own blocks' gradients (tensor.AttentionBackward of the block given the combined
// output and global log-sum-exp) and passes the sum on, and a last shift returns each
// block's gradients to its owner.
func cpP2P(p *Pass, cp parallel.Comm, q, k, v *tensor.Tensor, o cpAttnOptions) *tensor.Tensor {
	return tensor.Apply("CPRingAttention", &cpRing{p: p, cp: cp, o: o}, q, k, v)[0]
}

// cpRing is cpP2P's tensor.Function.
type cpRing struct {
	p  *Pass
	cp parallel.Comm
	o  cpAttnOptions
	// What backward needs, set by Forward.
	q, k, v  *tensor.Tensor // the inputs: [B, NH/tp, T/cp, HS], [B, G/tp, T/cp, HS] each
	out, lse *tensor.Tensor // combined output [B, T/cp, NH·HS/tp], global log-sum-exp [B, NH/tp, T/cp]
}

// cpBlock is one visible pair of a ring step: query chunk a of the rank's two and key
// chunk c of the block's two, with their global start positions and whether the pair is
// the diagonal of a causal mask.
type cpBlock struct {
	a, c   int
	qs, ks int
	diag   bool
}

// blocks returns ring step step's visible pairs (the block of rank (r−step) mod cp), n
// positions a chunk.
func (f *cpRing) blocks(step, n int) []cpBlock {
	size, rank := f.cp.Size(), f.cp.Rank()
	var bs []cpBlock
	for a, qc := range cpChunks(size, rank) {
		for c, kc := range cpChunks(size, (rank-step+size)%size) {
			if vis := cpVisibility(f.o.Causal, qc, kc); vis != cpInvisible {
				bs = append(bs, cpBlock{a: a, c: c, qs: qc * n, ks: kc * n, diag: vis == cpDiagonal})
			}
		}
	}
	return bs
}

// chunks returns the two halves along the sequence of x [B, H, 2n, ...], [B, H, n, ...].
func chunks(x *tensor.Tensor) []*tensor.Tensor { return tensor.Chunk(x, 2, 2) }

// Forward runs the ring: in = q, k, v; out = the combined output.
func (f *cpRing) Forward(in []*tensor.Tensor) []*tensor.Tensor {
	q, k, v := in[0], in[1], in[2]
	n, size := q.Dim(2)/2, f.cp.Size()
	qs := chunks(q)                           // 2 × [B, NH/tp, n, HS]
	kv := slices.Concat(chunks(k), chunks(v)) // k0, k1, v0, v1: [B, G/tp, n, HS] each
	ring := parallel.NewRing(f.p.Ctx, f.cp, f.p.Trace)
	var acc [2]cpAccum
	for i := range size {
		var wait func() []*tensor.Tensor
		if i < size-1 {
			wait = ring.Shift(parallel.EventCPRing, i, kv...)
		}
		start := time.Now()
		for _, bl := range f.blocks(i, n) {
			acc[bl.a].add(cpAttendBlock(f.p, qs[bl.a], kv[bl.c], kv[2+bl.c], f.o, bl.qs, bl.ks, bl.diag))
		}
		f.p.Trace.Record(start, parallel.EventCPAttention, i, 0)
		if wait != nil {
			next := wait()
			releaseAll(kv, in...)
			kv = next
		}
	}
	releaseAll(slices.Concat(kv, qs), in...)
	f.q, f.k, f.v = q, k, v
	out := concatCast(q.DType(), acc[0].out, acc[1].out) // [B, NH/tp, T/cp, HS]
	// Kept for backward with the heads side by side, the layout the output projection
	// reads: one copy of the output rather than this and a merged one.
	f.out = mergeHeads(out) // [B, T/cp, NH·HS/tp]
	releaseDead(out, f.out)
	f.lse = concatCast(acc[0].lse.DType(), acc[0].lse, acc[1].lse)
	return []*tensor.Tensor{f.out}
}

// Backward passes the blocks around the ring again with their gradients (see cpP2P):
// gs[0] is the output's gradient; it returns those of q, k and v.
func (f *cpRing) Backward(gs []*tensor.Tensor) []*tensor.Tensor {
	n, size, ct := f.q.Dim(2)/2, f.cp.Size(), f.lse.DType()
	b, nh, hs := f.q.Dim(0), f.q.Dim(1), f.q.Dim(3)
	heads := func(x *tensor.Tensor) *tensor.Tensor { return x.Reshape(b, 2*n, nh, hs).Permute(0, 2, 1, 3) }
	outH, doutH := heads(f.out), heads(gs[0])                                        // [B, NH/tp, T/cp, HS]
	qs, outs, douts, lses := chunks(f.q), chunks(outH), chunks(doutH), chunks(f.lse) // 2 × [B, NH/tp, n(, HS)]
	saved := []*tensor.Tensor{f.q, f.k, f.v, f.out, f.lse, gs[0]}
	defer releaseAll(slices.Concat(qs, outs, douts, lses, []*tensor.Tensor{outH, doutH}), saved...)
	kv := slices.Concat(chunks(f.k), chunks(f.v)) // the block held: k0, k1, v0, v1
	ring := parallel.NewRing(f.p.Ctx, f.cp, f.p.Trace)
	var dq [2]*tensor.Tensor            // in ct, [B, NH/tp, n, HS]
	var waitDKV func() []*tensor.Tensor // the gradients of the block held, summed by the ranks before
	var sent []*tensor.Tensor           // what waitDKV's shift sends, released once it has
	for i := range size {
		var waitKV func() []*tensor.Tensor
		if i < size-1 {
			waitKV = ring.Shift(parallel.EventCPRingBackward, i, kv...)
		}
		start := time.Now()
		dkv := make([]*tensor.Tensor, 4) // this rank's gradients of the block held, in ct
		for _, bl := range f.blocks(i, n) {
			ao := cpBlockOptions(f.p, f.o, bl.qs, bl.ks, bl.diag)
			dqb, dkb, dvb := tensor.AttentionBackward(qs[bl.a], kv[bl.c], kv[2+bl.c], outs[bl.a], lses[bl.a], douts[bl.a], ao)
			dq[bl.a] = accumulate(dq[bl.a], dqb, ct)
			dkv[bl.c] = accumulate(dkv[bl.c], dkb, ct)
			dkv[2+bl.c] = accumulate(dkv[2+bl.c], dvb, ct)
		}
		f.p.Trace.Record(start, parallel.EventCPAttentionBackward, i, 0)
		if waitDKV != nil { // every chunk of a step's block has a gradient from step 0's rank, its owner
			recv := waitDKV()
			releaseAll(sent)
			for j, g := range recv {
				dkv[j] = accumulate(dkv[j], g, ct)
			}
		}
		waitDKV, sent = ring.Shift(parallel.EventCPRingBackward, i, dkv...), dkv // on to the next holder; the last shift reaches the owner
		if waitKV != nil {
			next := waitKV()
			releaseAll(kv, saved...)
			kv = next
		}
	}
	releaseAll(kv, saved...)
	mine := waitDKV()
	if size > 1 { // on one rank the shift returns what it was given
		releaseAll(sent)
	}
	grads := []*tensor.Tensor{concatCast(f.q.DType(), dq[0], dq[1]), concatCast(f.k.DType(), mine[0], mine[1]),
		concatCast(f.v.DType(), mine[2], mine[3])}
	f.q, f.k, f.v, f.out, f.lse = nil, nil, nil, nil, nil
	return grads
}

// cpAccum is a query chunk's attention over the key blocks folded in so far: its output
// and log-sum-exp, in the log-sum-exp's dtype.
type cpAccum struct {
	out, lse *tensor.Tensor // [B, NH/tp, n, HS], [B, NH/tp, n]
}

// add folds in one key block's output o [B, NH/tp, n, HS] and log-sum-exp l [B, NH/tp, n]
// and releases them: with L = log(e^lse + e^l), out = e^(lse−L)·out + e^(l−L)·o and
// lse = L (the weights a softmax of the two log-sum-exps).
func (a *cpAccum) add(o, l *tensor.Tensor) {
	oc := o.Cast(l.DType())
	if oc != o {
		o.Release()
	}
	if a.out == nil {
		a.out, a.lse = oc, l
		return
	}
	pair := tensor.Concat(3, a.lse.Unsqueeze(3), l.Unsqueeze(3)) // [B, NH/tp, n, 2]
	logw := tensor.LogSoftmax(pair, tensor.SoftmaxOptions{})     // log e^(lse−L), log e^(l−L)
	ew := tensor.Exp(logw)                                       // the weights
	w := tensor.Split(ew, 3, 1, 1)                               // 2 × [B, NH/tp, n, 1]
	lw0 := logw.Narrow(3, 0, 1)                                  // [B, NH/tp, n, 1]
	lse := tensor.Sub(a.lse, lw0.Reshape(a.lse.Shape()...))      // L = lse − (lse − L)
	prev, next := tensor.Mul(a.out, w[0]), tensor.Mul(oc, w[1])  // [B, NH/tp, n, HS]
	out := tensor.Add(prev, next)
	releaseAll([]*tensor.Tensor{a.out, a.lse, oc, l, pair, logw, ew, w[0], w[1], lw0, prev, next})
	a.out, a.lse = out, lse
}

// accumulate returns acc + x in dtype dt (x cast to dt when acc is nil) and releases acc
// and x.
func accumulate(acc, x *tensor.Tensor, dt tensor.DType) *tensor.Tensor {
	xc := x.Cast(dt)
	if xc != x {
		x.Release()
	}
	if acc == nil {
		return xc
	}
	sum := tensor.Add(acc, xc)
	acc.Release()
	xc.Release()
	return sum
}

// concatCast returns the concatenation of a and b along the sequence (dim 2) in dtype dt
// and releases them.
func concatCast(dt tensor.DType, a, b *tensor.Tensor) *tensor.Tensor {
	ab := tensor.Concat(2, a, b)
	out := ab.Cast(dt)
	releaseAll([]*tensor.Tensor{a, b, ab}, out)
	return out
}

// releaseAll releases each of ts, except those sharing storage with one of live (views of
// tensors still in use).
func releaseAll(ts []*tensor.Tensor, live ...*tensor.Tensor) {
	for _, t := range ts {
		if t != nil {
			releaseDead(t, live...)
		}
	}
}
