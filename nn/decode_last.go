package nn

import (
	"slices"

	"megago/tensor"
)

// A decode step's last layer. Its output feeds only the logits, and DecodeStep computes
// logits for the rows its sequences ask for (a prompt chunk's last token, or none): the
// other rows, most of a prefill, still need the layer's keys and values in the cache,
// but not its attention, output projection and MLP. DecodeStep projects those rows to
// keys and values alone (decodeStore) and runs the whole layer on the rest, as the
// sequences' later chunks: every kernel gives a row the same bits whatever rows come
// with it, so the kept rows' outputs, the stored keys and values and hence the logits
// are unchanged bit for bit. A GPT-2-124M prefill saves the last layer's output
// projection and MLP, 6% of its multiply-adds.

// stepRows is some rows of a decode step: x [1, n, C], their positions, and their
// sequences (each row's chunk of its sequence).
type stepRows struct {
	x    *tensor.Tensor
	pos  []int
	seqs []DecodeSeq
}

// trimsLast reports whether DecodeStep may run m's last layer l on the rows with logits
// only: a pre-LN layer (whose attention input is its norm of x alone) without an MoE
// block that drops tokens over capacity (which depends on the rows that come together).
func (m *GPT) trimsLast(l *TransformerLayer) bool {
	return !m.Config.PostLN && (l.MoE == nil || m.Config.MoE.CapacityFactor == 0)
}

// splitLast splits a step's rows x [1, N, C] at positions pos, of seqs, for its last
// layer: drop, the rows no logits are asked for, and keep, each sequence's rows from its
// first with logits on (nil when there are none). It returns a nil drop when every row
// has logits.
func splitLast(x *tensor.Tensor, pos []int, seqs []DecodeSeq) (drop, keep *stepRows) {
	if !slices.ContainsFunc(seqs, func(s DecodeSeq) bool { return s.Logits < s.N }) {
		return nil, nil // a decode step's one-token sequences: no views made
	}
	var dx, kx []*tensor.Tensor
	drop, keep = &stepRows{}, &stepRows{}
	off := 0
	for _, s := range seqs {
		if d := s.N - s.Logits; d > 0 {
			dx = append(dx, x.Narrow(1, off, d))
			drop.pos = append(drop.pos, pos[off:off+d]...)
			drop.seqs = append(drop.seqs, DecodeSeq{Slot: s.Slot, Past: s.Past, N: d})
		}
		if s.Logits > 0 {
			k0 := off + s.N - s.Logits
			kx = append(kx, x.Narrow(1, k0, s.Logits))
			keep.pos = append(keep.pos, pos[k0:off+s.N]...)
			keep.seqs = append(keep.seqs, DecodeSeq{Slot: s.Slot, Past: s.Past + s.N - s.Logits, N: s.Logits, Logits: s.Logits})
		}
		off += s.N
	}
	drop.x = concat(1, dx)
	if len(kx) == 0 {
		return drop, nil
	}
	keep.x = concat(1, kx)
	return drop, keep
}

// decodeStore is the part of decode that the rows of x [1, N, C] (at positions pos, of
// seqs) need when nothing reads their output: their keys and values, stored in the
// layer's slots k, v. l is pre-LN (GPT.trimsLast).
func (l *TransformerLayer) decodeStore(p *Pass, x *tensor.Tensor, pos []int, seqs []DecodeSeq, k, v []*tensor.Tensor) {
	l.Attn.decodeStore(p, l.Norm1.Forward(x), pos, seqs, k, v)
}

// decodeStore projects x [1, N, C] to keys and values as decode does (the same path, so
// the same values) and stores each sequence's in its slots ck, cv, without attending.
func (a *SelfAttention) decodeStore(p *Pass, x *tensor.Tensor, pos []int, seqs []DecodeSeq, ck, cv []*tensor.Tensor) {
	if a.direct() {
		_, k, v := a.directHeads(p, x, false)
		storeKV(seqs, k, v, ck, cv)
		return
	}
	_, k, v := a.project(p, x, AttentionMask{Positions: pos}, 0)
	storeKV(seqs, k.Permute(0, 2, 1, 3), v.Permute(0, 2, 1, 3), ck, cv)
}
