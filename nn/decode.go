package nn

import (
	"errors"
	"fmt"

	"megago/parallel"
	"megago/tensor"
)

// Continuous-batching inference (the serve package's engine): one forward over a flat set
// of new tokens from several sequences, each sequence with its own slot of a SlotCache.
// The linear layers, norms and the MLP run once over all N tokens ([1, N, C]); attention
// runs per sequence against its slot's keys and values. Every row's arithmetic is the same
// whatever else is in the step: the GEMMs' row results do not depend on their row count,
// and attention sees only the sequence's own slot. A sequence's logits are therefore the
// same alone and in any batch, and equal Generate's, which runs the same ops on [B, T].

// SlotCache is a KV cache of fixed slots: for every layer and slot, keys and values
// [1, G/tp, MaxLen, HS], allocated once outside any scope. Head-major, so that the keys
// (and the values) of one head of a sequence are one contiguous stream, which attention
// reads in place (tensor.AttentionSlots); a step writes its new positions with
// CopyNarrowFrom. A slot holds one sequence's positions [0, Past); which positions are
// valid is the caller's bookkeeping (DecodeSeq).
type SlotCache struct {
	K, V   [][]*tensor.Tensor // [layer][slot] [1, G/tp, MaxLen, HS]
	MaxLen int                // positions per slot

	logits []float64 // DecodeStep's result rows, reused from step to step
	host   []float32 // the padded F32 logits read from the device, reused likewise
}

// SlotCacheBytes returns the memory a SlotCache of slots × maxLen positions takes for m
// on its rank: 2 (keys and values) · L · slots · G/tp · maxLen · HS elements of m's dtype.
func (m *GPT) SlotCacheBytes(slots, maxLen int) int64 {
	c := m.Config.TransformerConfig
	per := int64(c.KVHeads/m.region.tp.Size()) * int64(maxLen) * int64(c.HeadSize)
	return 2 * int64(len(m.Block.Layers)) * int64(slots) * per * int64(m.Word.Weight.DType().Size())
}

// NewSlotCache allocates, zeroed, a SlotCache of slots slots of maxLen positions for m
// (SlotCacheBytes). It panics if slots or maxLen is < 1.
func NewSlotCache(m *GPT, slots, maxLen int) *SlotCache {
	if slots < 1 || maxLen < 1 {
		panic(fmt.Sprintf("nn: NewSlotCache: %d slots of %d positions", slots, maxLen))
	}
	c := m.Config.TransformerConfig
	dev, dt := m.Word.Weight.Device(), m.Word.Weight.DType()
	sc := &SlotCache{MaxLen: maxLen}
	for range m.Block.Layers {
		k, v := make([]*tensor.Tensor, slots), make([]*tensor.Tensor, slots)
		for s := range k {
			k[s] = tensor.Zeros(dev, dt, 1, c.KVHeads/m.region.tp.Size(), maxLen, c.HeadSize).Keep()
			v[s] = tensor.Zeros(dev, dt, 1, c.KVHeads/m.region.tp.Size(), maxLen, c.HeadSize).Keep()
		}
		sc.K, sc.V = append(sc.K, k), append(sc.V, v)
	}
	return sc
}

// Release frees the cache's tensors.
func (c *SlotCache) Release() {
	for i := range c.K {
		for s := range c.K[i] {
			c.K[i][s].Release()
			c.V[i][s].Release()
		}
	}
	c.K, c.V = nil, nil
}

// DecodeSeq is one sequence's part of a DecodeStep: its N new tokens take positions
// [Past, Past+N) of slot Slot, whose positions [0, Past) hold its earlier tokens' keys and
// values. Logits asks for the logits of the chunk's last Logits tokens (0 ≤ Logits ≤ N):
// 1 for the next token, N for a prompt's log-probabilities, 0 for a prompt chunk that is
// not the last.
type DecodeSeq struct {
	Slot, Past, N, Logits int
}

// DecodeStep runs m in inference mode on the new tokens ids [N] of seqs (concatenated in
// seqs' order; N = Σ seqs[i].N), writes their keys and values into c and returns the
// asked-for logits over the true vocabulary, [R][V] for R = Σ seqs[i].Logits rows in
// seqs' order, the same on every TP rank. The rows live in a buffer of c that the next
// DecodeStep overwrites. Under tensor parallelism every rank of m's TP
// group calls it with the same ids and seqs (its own cache). The rows whose logits are
// not asked for skip the last layer's attention and MLP (decode_last.go).
//
// It returns an error for a failed collective. It panics if m is a pipeline stage or
// built with sequence parallelism, if N ≠ len(ids), if a sequence exceeds c.MaxLen or
// its slot is out of range, or if an id is outside the padded vocabulary.
func (m *GPT) DecodeStep(p *Pass, c *SlotCache, ids []int32, seqs []DecodeSeq) (rows [][]float64, err error) {
	checkDecode(m, c, ids, seqs)
	defer recoverCommErrorAs("DecodeStep", &err)
	dev := m.Word.Weight.Device()
	dev.NoGrad(func() {
		s := dev.NewScope()
		defer s.Close()
		pos := make([]int, 0, len(ids))
		for _, sq := range seqs {
			for j := range sq.N {
				pos = append(pos, sq.Past+j)
			}
		}
		x := m.embedAt(p, ids, pos) // [1, N, C]
		last := len(m.Block.Layers) - 1
		for i, l := range m.Block.Layers {
			beforeForward(l)
			if i == last && m.trimsLast(l) { // the rows without logits: keys and values only (decode_last.go)
				if drop, keep := splitLast(x, pos, seqs); drop != nil {
					ls := dev.NewScope()
					l.decodeStore(p, drop.x, drop.pos, drop.seqs, c.K[i], c.V[i])
					ls.Close()
					if keep == nil {
						return // no logits asked for
					}
					x, pos, seqs = keep.x, keep.pos, keep.seqs
				}
			}
			y := scoped(dev, func() *tensor.Tensor { return l.decode(p, x, pos, seqs, c.K[i], c.V[i]) })
			releaseDead(x, y)
			x = y
		}
		rows = m.decodeLogits(p, c, x, seqs)
	})
	return rows, err
}

// scoped runs f in a scope of its own and returns its result, kept in the enclosing
// scope: f's temporaries go back to the device's pool when it returns. DecodeStep runs
// each layer so, and the next layer reuses the buffers of the same sizes: a step's
// working memory is one layer's rather than all of them (at hundreds of tokens a step,
// hundreds of megabytes that, dropped between steps of different sizes, were faulted in
// afresh by every step).
func scoped(dev *tensor.Device, f func() *tensor.Tensor) *tensor.Tensor {
	s := dev.NewScope()
	defer s.Close()
	return f().Keep()
}

// checkDecode panics if DecodeStep cannot run on its arguments.
func checkDecode(m *GPT, c *SlotCache, ids []int32, seqs []DecodeSeq) {
	if !m.Stage.PreProcess || !m.Stage.PostProcess || m.region.sp {
		panic("nn: DecodeStep: m must be a whole model built without sequence parallelism")
	}
	n := 0
	for i, s := range seqs {
		if s.Slot < 0 || len(c.K) == 0 || s.Slot >= len(c.K[0]) || s.Past < 0 || s.N < 1 || s.Past+s.N > c.MaxLen ||
			s.Logits < 0 || s.Logits > s.N {
			panic(fmt.Sprintf("nn: DecodeStep: sequence %d %+v does not fit a cache of %d slots of %d positions", i, s, len(c.K[0]), c.MaxLen))
		}
		n += s.N
	}
	if n != len(ids) {
		panic(fmt.Sprintf("nn: DecodeStep: %d ids for sequences of %d new tokens", len(ids), n))
	}
}

// embedAt is Embed for ids [N] at positions pos [N]: [1, N, C].
func (m *GPT) embedAt(p *Pass, ids []int32, pos []int) *tensor.Tensor {
	dev, n := m.Word.Weight.Device(), len(ids)
	beforeForward(m.Word)
	x := m.Word.Forward(p, tensor.FromSlice(dev, ids, 1, n)) // [1, N, C]
	if m.Position == nil {
		return x
	}
	if top := maxInt(pos) + 1; top > m.Config.MaxPosition {
		panic(fmt.Sprintf("nn: DecodeStep: positions up to %d exceed MaxPosition %d", top, m.Config.MaxPosition))
	}
	p64 := make([]int64, n)
	for i, q := range pos {
		p64[i] = int64(q)
	}
	beforeForward(m.Position)
	return tensor.Add(x, m.Position.Forward(tensor.FromSlice(dev, p64, n)).Reshape(1, n, m.Config.Hidden))
}

func maxInt(x []int) int {
	m := 0
	for _, v := range x {
		m = max(m, v)
	}
	return m
}

// decode is Forward for DecodeStep: x [1, N, C] → [1, N, C], keys and values of layer's
// slots k, v [slot] [1, G/tp, MaxLen, HS].
func (l *TransformerLayer) decode(p *Pass, x *tensor.Tensor, pos []int, seqs []DecodeSeq, k, v []*tensor.Tensor) *tensor.Tensor {
	if l.Cross != nil {
		panic(fmt.Sprintf("nn: %s: DecodeStep of a decoder layer with cross-attention", l.name))
	}
	x = l.subBlock(p, x, l.Norm1, "attn", func(h *tensor.Tensor) (*tensor.Tensor, *tensor.Tensor) {
		return l.Attn.decode(p, h, pos, seqs, k, v)
	})
	return l.subBlock(p, x, l.Norm2, "mlp", func(h *tensor.Tensor) (*tensor.Tensor, *tensor.Tensor) {
		return l.ffn.forward(p, h)
	})
}

// decode is forward for DecodeStep: it projects x [1, N, C], stores each sequence's keys
// and values in its slot of ck, cv ([slot] [1, G/tp, MaxLen, HS]) and attends each
// sequence's queries to its slot's positions [0, Past+N), causally within the new tokens.
// Without query/key norms and rotary embeddings, and with the fused core, it takes the
// heads straight from the projection (decodeDirect); else through project.
func (a *SelfAttention) decode(p *Pass, x *tensor.Tensor, pos []int, seqs []DecodeSeq, ck, cv []*tensor.Tensor) (y, bias *tensor.Tensor) {
	if a.direct() {
		return a.decodeDirect(p, x, seqs, ck, cv)
	}
	q, k, v := a.project(p, x, AttentionMask{Positions: pos}, 0) // [1, NH/tp, N, HS], [1, G/tp, N, HS] ×2
	k, v = k.Permute(0, 2, 1, 3), v.Permute(0, 2, 1, 3)          // [1, N, G/tp, HS]
	ks, vs, lens := storeKV(seqs, k, v, ck, cv)
	qs := make([]*tensor.Tensor, len(seqs))
	off := 0
	for i, s := range seqs {
		qs[i] = q.Narrow(2, off, s.N) // [1, NH/tp, n, HS]
		off += s.N
	}
	var outs []*tensor.Tensor
	if a.spec.unfused { // the unfused core takes copies of the slots' valid positions
		outs = make([]*tensor.Tensor, len(seqs))
		for i := range seqs {
			outs[i] = a.core(p, qs[i], ks[i].Narrow(2, 0, lens[i]), vs[i].Narrow(2, 0, lens[i]), AttentionMask{Causal: true}, a.spec)
		}
	} else { // the fused one reads the slots in place, Attention's values bit for bit
		outs = tensor.AttentionSlots(qs, ks, vs, lens, tensor.AttentionOptions{Scale: a.spec.scale, Causal: true})
		for i := range outs {
			outs[i] = mergeHeads(outs[i]) // [1, n, NH·HS/tp]
		}
	}
	return a.Proj.ForwardWithBias(p, concat(1, outs)) // [1, N, C]
}

// direct reports whether decode takes the heads straight from the projection
// (decodeDirect): no query/key norms or rotary embeddings, and the fused core.
func (a *SelfAttention) direct() bool {
	return a.QNorm == nil && a.cfg.Position != RoPE && !a.spec.unfused
}

// storeKV writes each sequence's new keys and values, from k, v [1, N, G/tp, HS]
// (sequences in order), into its slot of ck, cv ([slot] [1, G/tp, MaxLen, HS]), and
// returns each sequence's slots ks, vs [seq] and how many positions they hold, Past+n.
func storeKV(seqs []DecodeSeq, k, v *tensor.Tensor, ck, cv []*tensor.Tensor) (ks, vs []*tensor.Tensor, lens []int) {
	ks, vs, lens = make([]*tensor.Tensor, len(seqs)), make([]*tensor.Tensor, len(seqs)), make([]int, len(seqs))
	at, n := make([]int, len(seqs)), make([]int, len(seqs))
	for i, s := range seqs {
		ks[i], vs[i], lens[i] = ck[s.Slot], cv[s.Slot], s.Past+s.N
		at[i], n[i] = s.Past, s.N
	}
	tensor.StoreSlots(ks, at, n, k)
	tensor.StoreSlots(vs, at, n, v)
	return ks, vs, lens
}

// concat is tensor.Concat that returns a single tensor as it is.
func concat(dim int, ts []*tensor.Tensor) *tensor.Tensor {
	if len(ts) == 1 {
		return ts[0]
	}
	return tensor.Concat(dim, ts...)
}

// decodeLogits returns the logits over the true vocabulary of the rows of x [1, N, C]
// that seqs ask for, [R][V], gathered over TP, in c's buffer.
func (m *GPT) decodeLogits(p *Pass, c *SlotCache, x *tensor.Tensor, seqs []DecodeSeq) [][]float64 {
	var want []*tensor.Tensor
	off := 0
	for _, s := range seqs {
		if s.Logits > 0 {
			want = append(want, x.Narrow(1, off+s.N-s.Logits, s.Logits)) // [1, Logits, C]
		}
		off += s.N
	}
	if len(want) == 0 {
		return nil
	}
	logits := m.logits(p, concat(1, want))                    // [1, R, Vp/tp]
	full := parallel.GatherFromTP(p.Ctx, m.region.tp, logits) // [1, R, Vp]
	return c.hostRows(full, m.Config.Vocab)
}

// recoverCommErrorAs turns a panic carrying a *parallel.Error (a collective that failed
// inside a TP mapping) into *err, an error of op; any other panic is a bug and continues.
func recoverCommErrorAs(op string, err *error) {
	if r := recover(); r != nil {
		*err = commError(op, r)
	}
}

// commError returns the error of op carried by a panic value r that holds a
// *parallel.Error (a collective that failed inside a TP mapping); any other panic is a
// bug and continues.
func commError(op string, r any) error {
	var pe *parallel.Error
	if e, ok := r.(error); ok && errors.As(e, &pe) {
		return fmt.Errorf("nn: %s: %w", op, e)
	}
	panic(r)
}
