package nn

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"

	"megago/parallel"
	"megago/tensor"
)

// attnMemory is what one SelfAttention forward and backward adds to its device's tensor
// bytes, above what the device held before (parameters and input): held after the
// forward (what backward keeps) and the peak.
type attnMemory struct{ held, peak int64 }

// attentionMemory runs a causal SelfAttention of cfg forward and backward on x
// [B, t, C] (t = T/cp) in a scope on b.Dev and returns its attnMemory.
func attentionMemory(b *Builder, cfg TransformerConfig, bsz, t, c int) attnMemory {
	a := NewSelfAttention(b, "attn", cfg)
	x := tensor.FromSlice(b.Dev, seqValues(bsz*t*c, 1), bsz, t, c)
	x.SetRequiresGrad(true)
	base := b.Dev.Stats().InUse
	s := b.Dev.NewScope()
	defer s.Close()
	p := &Pass{Ctx: context.Background(), Train: true, RNG: tensor.NewRNG(11)}
	y := tensor.Sum(a.Forward(p, x, AttentionMask{Causal: true}, nil))
	held := b.Dev.Stats().InUse - base
	y.Backward()
	return attnMemory{held, b.Dev.Stats().Peak - base}
}

// TestCPRingMemoryScales: a p2p SelfAttention layer's memory per rank falls as 1/cp at a
// fixed sequence length. What its forward keeps for backward is 1/cp of the serial
// layer's (a ring that kept every received key/value block and partial output for
// autograd held more at CP=4 than the serial layer); the peak of forward and backward,
// whose ring working set (chunk copies, the block in flight, the travelling key/value
// gradients) is a fixed multiple of a rank's keys, halves from CP=4 to CP=8 (at CP=2
// the ring has too few steps to hold its whole working set at once).
func TestCPRingMemoryScales(t *testing.T) {
	const bsz, tlen, c = 1, 1024, 16
	// The loss scalar, and a few scalars and per-call tensors that do not split.
	const heldSlack, peakSlack = 64, 4096
	cfg := TransformerConfig{NumLayers: 1, Hidden: c, Heads: 2, Vocab: 10, Position: NoPositions}
	serial := attentionMemory(testBuilder(parallel.Self(), false), cfg, bsz, tlen, c)
	peaks := map[int]int64{}
	for _, cp := range []int{4, 8} {
		cfg.CP = cp
		got := onRanks(t, cp, func(g parallel.Comm, dev *tensor.Device) (attnMemory, error) {
			b := rankBuilder(parallel.Self(), dev)
			b.CP = g
			return attentionMemory(b, cfg, bsz, tlen/cp, c), nil
		})
		for r, m := range got {
			assert.LessOrEqual(t, m.held, serial.held/int64(cp)+heldSlack, "cp %d rank %d: bytes held for backward (serial %d)", cp, r, serial.held)
			peaks[cp] = max(peaks[cp], m.peak)
		}
	}
	assert.LessOrEqual(t, peaks[8], peaks[4]/2+peakSlack, "peak bytes per rank at cp 8 against cp 4")
}
