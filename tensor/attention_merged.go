package tensor

// Attention whose output has its heads side by side, [B, Tq, NH·HS], the layout of the
// output projection's input (AttentionMerged), and the optional kernels a backend
// implements for it (MergedAttentionKernels).

// MergedAttentionKernels is implemented by a backend whose fused attention can write its
// output with the heads side by side, a.Out [B, Tq, NH·HS] (and read the output gradient,
// g.DOut, in that layout), the CPU backend's for one. Everything else is as in
// AttentionKernels, and the values are bit for bit those of AttentionKernels with Out
// [B, NH, Tq, HS] permuted.
type MergedAttentionKernels interface {
	// AttentionMerged is AttentionKernels.Attention with a.Out [B, Tq, NH·HS].
	AttentionMerged(a AttentionArgs, p AttentionParams)
	// AttentionMergedBackward is AttentionKernels.AttentionBackward with a.Out and
	// g.DOut [B, Tq, NH·HS].
	AttentionMergedBackward(a AttentionArgs, g AttentionGrads, p AttentionParams)
}

// AttentionMerged returns Attention(q, k, v, o)'s output with its heads side by side,
// out [B, Tq, NH·HS] (out.Permute(0, 2, 1, 3).Reshape(B, Tq, NH·HS) of Attention's: the
// input of an attention layer's output projection), and lse [B, NH, Tq], the same values
// and gradients bit for bit. Where the backend implements MergedAttentionKernels the
// kernels write and read that layout, without the permutation's copies forward and
// backward; other backends permute Attention's output. It panics where Attention does.
func AttentionMerged(q, k, v *Tensor, o AttentionOptions) (out, lse *Tensor) {
	p := checkAttention("AttentionMerged", q, k, v, o)
	dev := q.Device()
	b, nh, tq, hs := q.shape[0], q.shape[1], q.shape[2], q.shape[3]
	mk, ok := dev.backend.(MergedAttentionKernels)
	if !ok {
		out, lse = Attention(q, k, v, o)
		return out.Permute(0, 2, 1, 3).Reshape(b, tq, nh*hs), lse
	}
	dev.countFused(FusedAttention)
	out = empty(dev, q.dtype, Shape{b, tq, nh * hs})
	lse = empty(dev, q.dtype.Compute(), q.shape[:3])
	mk.AttentionMerged(attentionArgs(q, k, v, o, out, lse), p)
	record("AttentionMerged", []*Tensor{out, lse}, []*Tensor{q, k, v, o.Bias}, func(gys []*Tensor) []*Tensor {
		dq, dk, dv, db := attentionGrads(q, k, v, o, p, out, lse, gys[0], gys[1], mk.AttentionMergedBackward)
		return []*Tensor{dq, dk, dv, db}
	})
	return out, lse
}

func (cpuBackend) AttentionMerged(a AttentionArgs, p AttentionParams) { cpuBackend{}.Attention(a, p) }

func (cpuBackend) AttentionMergedBackward(a AttentionArgs, g AttentionGrads, p AttentionParams) {
	cpuBackend{}.AttentionBackward(a, g, p)
}
