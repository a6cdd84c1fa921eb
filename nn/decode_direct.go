package nn

import "megago/tensor"

// decodeDirect is SelfAttention.decode for a layer whose queries and keys go into the
// attention as projected (no QKNorm, no RoPE) with the fused core: it cuts the fused
// projection [1, N, G/tp·(NH/G+2)·HS] into its queries and keys and values once, position
// major, instead of permuting it to heads first. Every sequence stores its keys and
// values in its slots; a step of one-token sequences (a decode step's) then attends in one
// tensor.AttentionSlotsRows, its queries and outputs the rows of one tensor each, with no
// tensor per sequence; any other step in one tensor.AttentionSlotsInto (attendSeqs). The
// same values as the projected path's: only copies differ.
func (a *SelfAttention) decodeDirect(p *Pass, x *tensor.Tensor, seqs []DecodeSeq, ck, cv []*tensor.Tensor) (y, bias *tensor.Tensor) {
	q, k, v := a.directHeads(p, x, true)
	ks, vs, lens := storeKV(seqs, k, v, ck, cv)
	n, nh, hs := q.Dim(1), q.Dim(2), q.Dim(3)
	att := tensor.Empty(x.Device(), q.DType(), 1, n, nh*hs) // [1, N, NH·HS/tp]
	o := tensor.AttentionOptions{Scale: a.spec.scale, Causal: true}
	if oneTokenEach(seqs) { // rows in, rows out
		tensor.AttentionSlotsRows(att, q, ks, vs, lens, o)
	} else {
		attendSeqs(att, q, seqs, ks, vs, lens, o)
	}
	k.Release()
	v.Release()
	return a.Proj.ForwardWithBias(p, att) // [1, N, C]
}

// directHeads projects x [1, N, C] and cuts the fused projection into the queries
// [1, N, NH/tp, HS] (nil unless withQ) and the keys and values [1, N, G/tp, HS], copies.
func (a *SelfAttention) directHeads(p *Pass, x *tensor.Tensor, withQ bool) (q, k, v *tensor.Tensor) {
	c := a.cfg
	qkv := a.QKV.Forward(p, x) // [1, N, G/tp·(NH/G+2)·HS]
	n, gl, per, hs := qkv.Dim(1), c.KVHeads/a.tp.Size(), c.Heads/c.KVHeads, c.HeadSize
	heads := qkv.Reshape(1, n, gl, per+2, hs)
	if withQ {
		q = heads.Narrow(3, 0, per).Reshape(1, n, gl*per, hs)
	}
	k = heads.Narrow(3, per, 1).Reshape(1, n, gl, hs)
	v = heads.Narrow(3, per+1, 1).Reshape(1, n, gl, hs)
	qkv.Release() // consumed: q, k and v are copies
	return q, k, v
}

// attendSeqs writes into att [1, N, NH·HS/tp] the attention of the queries q
// [1, N, NH/tp, HS] of seqs, some of more than one token, over their slots ks, vs:
// a one-token sequence's query and output are views of its rows, a longer one's are
// permuted to heads, and its output rows copied.
func attendSeqs(att, q *tensor.Tensor, seqs []DecodeSeq, ks, vs []*tensor.Tensor, lens []int, o tensor.AttentionOptions) {
	n, nh, hs := q.Dim(1), q.Dim(2), q.Dim(3)
	qs, outs := make([]*tensor.Tensor, len(seqs)), make([]*tensor.Tensor, len(seqs))
	// A token's [1, NH/tp, 1, HS] is [1, 1, NH/tp, HS]'s layout: one view each, of these.
	q1, att1 := q.Reshape(n, nh, 1, hs), att.Reshape(n, nh, 1, hs)
	off := 0
	for i, s := range seqs {
		if s.N == 1 {
			qs[i], outs[i] = q1.Narrow(0, off, 1), att1.Narrow(0, off, 1) // views
		} else {
			qs[i] = q.Narrow(1, off, s.N).Permute(0, 2, 1, 3) // [1, NH/tp, n, HS]
			outs[i] = tensor.Empty(q.Device(), q.DType(), 1, nh, s.N, hs)
		}
		off += s.N
	}
	// One pass over every sequence's heads (not a parallel region per sequence), the
	// one-token sequences' outputs written in their rows of att.
	tensor.AttentionSlotsInto(outs, qs, ks, vs, lens, o)
	off = 0
	for i, s := range seqs {
		if s.N > 1 {
			att.CopyNarrowFrom(1, off, mergeHeads(outs[i])) // [1, n, NH·HS/tp]
			outs[i].Release()
		}
		off += s.N
	}
}

// oneTokenEach reports whether every sequence of seqs has one new token.
func oneTokenEach(seqs []DecodeSeq) bool {
	for _, s := range seqs {
		if s.N != 1 {
			return false
		}
	}
	return true
}
