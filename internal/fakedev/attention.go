package fakedev

import "megago/tensor"

// The fused attention kernels (tensor.AttentionKernels), run like every other kernel: each
// span translated from handle to CPU storage, then the CPU kernel.

// attentionArgs translates the spans of a.
func (b *Backend) attentionArgs(op string, a tensor.AttentionArgs) tensor.AttentionArgs {
	return tensor.AttentionArgs{Q: b.span(op, a.Q), K: b.span(op, a.K), V: b.span(op, a.V),
		Mask: b.span(op, a.Mask), Bias: b.span(op, a.Bias), Segments: b.span(op, a.Segments), Out: b.span(op, a.Out), LSE: b.span(op, a.LSE)}
}

// Attention runs the CPU kernel on the storage behind the handles.
func (b *Backend) Attention(a tensor.AttentionArgs, p tensor.AttentionParams) {
	b.cpu.Attention(b.attentionArgs("Attention", a), p)
}

// AttentionBackward runs the CPU kernel on the storage behind the handles.
func (b *Backend) AttentionBackward(a tensor.AttentionArgs, g tensor.AttentionGrads, p tensor.AttentionParams) {
	const n = "AttentionBackward"
	b.cpu.AttentionBackward(b.attentionArgs(n, a), tensor.AttentionGrads{DOut: b.span(n, g.DOut), DLSE: b.span(n, g.DLSE),
		DQ: b.span(n, g.DQ), DK: b.span(n, g.DK), DV: b.span(n, g.DV), DBias: b.span(n, g.DBias)}, p)
}
