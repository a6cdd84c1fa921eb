package nn

import "megago/tensor"

// decodeDirect is SelfAttention.decode for a layer whose queries and keys go into the
// attention as projected (no QKNorm, no RoPE) with the fused core: it cuts the fused
// projection [1, N, G/tp·(NH/G+2)·HS] into its queries and keys and values once, position
// major, instead of permuting it to heads first. A sequence of one new token (a decode
// step's) then stores its keys and values and attends with views of its rows, writing
// its output row in place; a longer one's are permuted to heads, and its output rows
// copied. All the sequences attend in one tensor.AttentionSlotsInto. The same values as
// the projected path's: only copies differ.
func (a *SelfAttention) decodeDirect(p *Pass, x *tensor.Tensor, seqs []DecodeSeq, ck, cv []*tensor.Tensor) (y, bias *tensor.Tensor) {
	c := a.cfg
	qkv := a.QKV.Forward(p, x) // [1, N, G/tp·(NH/G+2)·HS]
	n, gl, per, hs := qkv.Dim(1), c.KVHeads/a.tp.Size(), c.Heads/c.KVHeads, c.HeadSize
	heads := qkv.Reshape(1, n, gl, per+2, hs)
	q := heads.Narrow(3, 0, per).Reshape(1, n, gl*per, hs) // [1, N, NH/tp, HS]
	k := heads.Narrow(3, per, 1).Reshape(1, n, gl, hs)     // [1, N, G/tp, HS]
	v := heads.Narrow(3, per+1, 1).Reshape(1, n, gl, hs)
	qkv.Release() // consumed: q, k and v are copies
	ks, vs, lens := storeKV(seqs, k, v, ck, cv)
	qs, outs := make([]*tensor.Tensor, len(seqs)), make([]*tensor.Tensor, len(seqs))
	att := tensor.Empty(x.Device(), q.DType(), 1, n, gl*per*hs) // [1, N, NH·HS/tp]
	// A token's [1, NH/tp, 1, HS] is [1, 1, NH/tp, HS]'s layout: one view each, of these.
	q1, att1 := q.Reshape(n, gl*per, 1, hs), att.Reshape(n, gl*per, 1, hs)
	off := 0
	for i, s := range seqs {
		if s.N == 1 {
			qs[i], outs[i] = q1.Narrow(0, off, 1), att1.Narrow(0, off, 1) // views
		} else {
			qs[i] = q.Narrow(1, off, s.N).Permute(0, 2, 1, 3) // [1, NH/tp, n, HS]
			outs[i] = tensor.Empty(x.Device(), q.DType(), 1, gl*per, s.N, hs)
		}
		off += s.N
	}
	// One pass over every sequence's heads (not a parallel region per sequence), the
	// one-token sequences' outputs written in their rows of att.
	tensor.AttentionSlotsInto(outs, qs, ks, vs, lens, tensor.AttentionOptions{Scale: a.spec.scale, Causal: true})
	off = 0
	for i, s := range seqs {
		if s.N > 1 {
			att.CopyNarrowFrom(1, off, mergeHeads(outs[i])) // [1, n, NH·HS/tp]
			outs[i].Release()
		}
		off += s.N
	}
	k.Release()
	v.Release()
	return a.Proj.ForwardWithBias(p, att) // [1, N, C]
}
