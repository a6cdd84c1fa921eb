package nn

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"megago/parallel"
	"megago/tensor"
)

// cpTol: f64 throughout; CP only reorders the softmax's sums (block log-sum-exp
// combination) and the sum of parameter gradients over ranks.
const cpTol = 1e-10

// attnRun is one SelfAttention forward and backward: the output, the input's gradient and
// the parameters' gradients by name.
type attnRun struct {
	y, dx []float64
	grads map[string][]float64
}

// runAttention builds attention "attn" of cfg with b, runs it on x [B, T, C] (rows of
// the positions the rank holds) with dropout keyed by seed, and backpropagates Σ y·gy.
func runAttention(b *Builder, cfg TransformerConfig, x, gy *tensor.Tensor, causal bool) attnRun {
	a := NewSelfAttention(b, "attn", cfg)
	p := &Pass{Ctx: context.Background(), Train: true, RNG: tensor.NewRNG(11)}
	x.SetRequiresGrad(true)
	y := a.Forward(p, x, AttentionMask{Causal: causal}, nil)
	tensor.Sum(tensor.Mul(y, gy)).Backward()
	r := attnRun{y: tensor.ToSlice[float64](y), dx: tensor.ToSlice[float64](x.Grad()), grads: map[string][]float64{}}
	for _, p := range a.Params() {
		r.grads[p.Name] = tensor.ToSlice[float64](p.Grad())
	}
	return r
}

// cpRows returns the rows of v [B, T, C] at positions pos, [B, len(pos), C].
func cpRows(v []float64, b, t, c int, pos []int) []float64 {
	out := make([]float64, 0, b*len(pos)*c)
	for i := range b {
		for _, j := range pos {
			out = append(out, v[(i*t+j)*c:(i*t+j+1)*c]...)
		}
	}
	return out
}

// TestSelfAttentionCPEqualsSerial: a SelfAttention at CP = 2 and 4, each comm type,
// computes on each rank's CPPositions rows what the unfused serial layer computes on
// them (outputs and input gradients), and the ranks' parameter gradients sum to the
// serial ones; causal and not, GQA, attention dropout (masks by global coordinates),
// RoPE at the global positions.
func TestSelfAttentionCPEqualsSerial(t *testing.T) {
	const bsz, tlen, c = 2, 16, 16
	for _, tc := range []struct {
		name          string
		cp            int
		comm          string
		causal        bool
		kvHeads       int
		dropout       float64
		pos           Position
		sequenceSplit bool
	}{
		{"p2p-cp2-causal", 2, "p2p", true, 4, 0, NoPositions, false},
		{"p2p-cp4-causal-gqa-dropout-rope", 4, "p2p", true, 2, 0.2, RoPE, false},
		{"p2p-cp2-full-gqa-rope", 2, "p2p", false, 2, 0.1, RoPE, false},
		{"allgather-cp2-causal-rope-dropout", 2, "all_gather", true, 2, 0.2, RoPE, false},
		{"allgather-cp4-full", 4, "allgather", false, 4, 0, NoPositions, false},
		{"allgather-cp4-causal-gqa-dropout", 4, "all_gather", true, 1, 0.3, RoPE, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := TransformerConfig{NumLayers: 1, Hidden: c, Heads: 4, KVHeads: tc.kvHeads, Vocab: 10, Position: tc.pos,
				AttnDropout: tc.dropout, CP: tc.cp, CPCommType: tc.comm}
			xv, gys := seqValues(bsz*tlen*c, 1), seqValues(bsz*tlen*c, 2)
			ref := testBuilder(parallel.Self(), false)
			ref.Unfused = true
			want := runAttention(ref, cfg, tensor.FromSlice(ref.Dev, xv, bsz, tlen, c), tensor.FromSlice(ref.Dev, gys, bsz, tlen, c), tc.causal)
			got := onRanks(t, tc.cp, func(cp parallel.Comm, dev *tensor.Device) (attnRun, error) {
				pos := CPPositions(tlen, tc.cp, cp.Rank())
				b := rankBuilder(parallel.Self(), dev)
				b.CP = cp
				x := tensor.FromSlice(dev, cpRows(xv, bsz, tlen, c, pos), bsz, len(pos), c)
				gy := tensor.FromSlice(dev, cpRows(gys, bsz, tlen, c, pos), bsz, len(pos), c)
				return runAttention(b, cfg, x, gy, tc.causal), nil
			})
			for r, g := range got {
				pos := CPPositions(tlen, tc.cp, r)
				require.InDeltaSlice(t, cpRows(want.y, bsz, tlen, c, pos), g.y, cpTol, "rank %d output", r)
				require.InDeltaSlice(t, cpRows(want.dx, bsz, tlen, c, pos), g.dx, cpTol, "rank %d input gradient", r)
			}
			for name, w := range want.grads {
				sum := make([]float64, len(w))
				for _, g := range got {
					for i, v := range g.grads[name] {
						sum[i] += v
					}
				}
				require.InDeltaSlice(t, w, sum, cpTol, "%s gradient summed over CP", name)
			}
		})
	}
}

// TestCPSliceTakesTheRanksChunks: CPSlice keeps CPPositions along dim 1, written out by
// hand for T = 8 at cp 2.
func TestCPSliceTakesTheRanksChunks(t *testing.T) {
	dev := tensor.NewCPU()
	ids := tensor.FromSlice(dev, []int64{0, 1, 2, 3, 4, 5, 6, 7, 10, 11, 12, 13, 14, 15, 16, 17}, 2, 8)
	require.Equal(t, []int64{0, 1, 6, 7, 10, 11, 16, 17}, tensor.ToSlice[int64](CPSlice(ids, 2, 0)))
	require.Equal(t, []int64{2, 3, 4, 5, 12, 13, 14, 15}, tensor.ToSlice[int64](CPSlice(ids, 2, 1)))
	require.Same(t, ids, CPSlice(ids, 1, 0))
	require.Panics(t, func() { CPSlice(ids, 3, 0) }, "8 is not a multiple of 6")
}

// TestGPTUnderCPRefusesBadSequences: a sequence that is not a multiple of 2·cp, and
// documents' segments, panic with a message saying so.
func TestGPTUnderCPRefusesBadSequences(t *testing.T) {
	cfg := GPTConfig{TransformerConfig: TransformerConfig{NumLayers: 1, Hidden: 8, Heads: 2, Vocab: 16, MaxPosition: 16},
		VocabMultiple: 1}
	onRanks(t, 2, func(cp parallel.Comm, dev *tensor.Device) (struct{}, error) {
		b := rankBuilder(parallel.Self(), dev)
		b.CP = cp
		m, err := NewGPT(b, cfg, Stage{})
		if err != nil {
			return struct{}{}, err
		}
		p := Eval(context.Background())
		odd := tensor.FromSlice(dev, []int64{1, 2, 3}, 1, 3) // T/cp = 3: T = 6 is not a multiple of 4
		assert.PanicsWithValue(t, "nn: GPT: token ids [1 3] at context-parallel size 2 (past 0): want [B, T/cp] with the sequence T a multiple of 2·cp = 4, and no KV cache",
			func() { m.Forward(p, odd, nil) })
		ids := tensor.FromSlice(dev, []int64{1, 2, 3, 4}, 1, 4)
		seg := tensor.FromSlice(dev, []int32{0, 0, 1, 1}, 1, 4)
		assert.PanicsWithValue(t, "nn: context-parallel attention: padding masks, attention bias and documents' segments (Documents.Segments) are not supported under CP",
			func() { m.ForwardDocuments(p, ids, Documents{Segments: seg}) })
		return struct{}{}, nil
	})
}

// TestCPRingTrace: with Pass.Trace the p2p core records each ring step's transfer and
// attention; block i+1's transfer is started before block i's attention and has ended
// before block i+1's attention starts, so it runs alongside block i's. In backward the
// same holds for the blocks' transfers and gradient computations (with one more transfer
// per step: the block's accumulated gradients, passed on after its computation).
func TestCPRingTrace(t *testing.T) {
	const cp, bsz, tlen, c = 4, 1, 16, 8
	cfg := TransformerConfig{NumLayers: 1, Hidden: c, Heads: 2, Vocab: 10, Position: NoPositions}
	epoch := time.Now()
	traces := onRanks(t, cp, func(g parallel.Comm, dev *tensor.Device) (*parallel.Trace, error) {
		b := rankBuilder(parallel.Self(), dev)
		b.CP = g
		a := NewSelfAttention(b, "attn", cfg)
		tr := parallel.NewTrace(g.Rank(), epoch)
		p := &Pass{Ctx: context.Background(), Trace: tr}
		x := tensor.FromSlice(dev, seqValues(bsz*tlen/cp*c, g.Rank()), bsz, tlen/cp, c)
		tensor.Sum(a.Forward(p, x, AttentionMask{Causal: true}, nil)).Backward()
		return tr, nil
	})
	for r, tr := range traces {
		for _, phase := range []struct {
			name            string
			ring, attn      parallel.EventKind
			transfersPerRun int // all ring steps together
		}{
			{"forward", parallel.EventCPRing, parallel.EventCPAttention, cp - 1},
			{"backward", parallel.EventCPRingBackward, parallel.EventCPAttentionBackward, 2*cp - 1},
		} {
			ring, attn, transfers := map[int]parallel.Event{}, map[int]parallel.Event{}, 0
			for _, e := range tr.Events() {
				switch e.Kind {
				case phase.ring:
					transfers++
					if f, ok := ring[e.Micro]; !ok || e.Start < f.Start {
						ring[e.Micro] = e // the step's first transfer: the next block's
					}
				case phase.attn:
					attn[e.Micro] = e
				}
			}
			require.Len(t, attn, cp, "rank %d %s: one attention event per ring step", r, phase.name)
			require.Equal(t, phase.transfersPerRun, transfers, "rank %d %s: transfers", r, phase.name)
			for i := range cp - 1 {
				assert.LessOrEqual(t, ring[i].Start, attn[i].Start, "rank %d %s step %d: transfer started before the attention", r, phase.name, i)
				assert.LessOrEqual(t, ring[i].End, attn[i+1].Start, "rank %d %s step %d: block received before its attention", r, phase.name, i+1)
			}
		}
	}
}

// TestGPTCPLogitsAndLoss: a 2-layer GPT at CP = 2 (per-layer comm types; learned
// positions, and Llama-style RoPE with GQA) gives on each rank's CPSlice of the batch the
// serial logits of those positions, and every rank's loss is the serial mean over all
// tokens (some labels ignored).
func TestGPTCPLogitsAndLoss(t *testing.T) {
	const bsz, tlen, vocab = 2, 8, 16
	llama := LlamaConfig(2, 8, 2, 1, 16, vocab)
	llama.VocabMultiple, llama.CPCommType = 1, "all_gather"
	for _, tc := range []struct {
		name string
		cfg  GPTConfig
	}{
		{"gpt2-learned-p2p,all_gather", GPTConfig{TransformerConfig: TransformerConfig{NumLayers: 2, Hidden: 8, Heads: 2,
			Vocab: vocab, MaxPosition: tlen, Bias: true, CPCommType: "p2p,all_gather"}, VocabMultiple: 1}},
		{"llama-rope-gqa-all_gather", llama},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ids, labels := make([]int64, bsz*tlen), make([]int64, bsz*tlen)
			for i := range ids {
				ids[i], labels[i] = int64(i*5%vocab), int64((i*5+3)%vocab)
			}
			labels[3], labels[12] = -100, -100
			run := func(b *Builder, ids, labels *tensor.Tensor) ([]float64, float64) {
				m, err := NewGPT(b, tc.cfg, Stage{})
				require.NoError(t, err)
				p := Eval(context.Background())
				logits := m.Forward(p, ids, nil)
				loss, _ := m.Loss(p, logits, labels)
				return tensor.ToSlice[float64](logits), loss.Item()
			}
			ref := testBuilder(parallel.Self(), false)
			wantLogits, wantLoss := run(ref, tensor.FromSlice(ref.Dev, ids, bsz, tlen), tensor.FromSlice(ref.Dev, labels, bsz, tlen))
			type out struct {
				logits []float64
				loss   float64
			}
			got := onRanks(t, 2, func(cp parallel.Comm, dev *tensor.Device) (out, error) {
				b := rankBuilder(parallel.Self(), dev)
				b.CP = cp
				l, loss := run(b, CPSlice(tensor.FromSlice(dev, ids, bsz, tlen), 2, cp.Rank()),
					CPSlice(tensor.FromSlice(dev, labels, bsz, tlen), 2, cp.Rank()))
				return out{l, loss}, nil
			})
			for r, g := range got {
				require.InDeltaSlice(t, cpRows(wantLogits, bsz, tlen, vocab, CPPositions(tlen, 2, r)), g.logits, cpTol, "rank %d logits", r)
				require.InDelta(t, wantLoss, g.loss, cpTol, "rank %d loss", r)
			}
		})
	}
}
