package nn

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"megago/parallel"
	"megago/tensor"
)

// packedRun is what one forward (and backward) of a GPT gives: the full logits per
// token (gathered over TP) and, at TP=1, each parameter's gradient of the summed
// per-token losses.
type packedRun struct {
	logits [][]float64 // per token of the batch, [Vp]
	grads  map[string][]float64
}

// gptTokens runs m on ids [B, T] with documents d (nil tensors: Forward) and returns its
// per-token logits; with backward, it adds the gradient of the per-token losses' sum
// against labels into the parameters' gradients.
func gptTokens(t *testing.T, c parallel.Comm, m *GPT, ids, labels []int64, b int, d Documents, backward bool) [][]float64 {
	t.Helper()
	dev := m.Word.Weight.Device()
	p := &Pass{Ctx: context.Background(), Train: backward, RNG: tensor.NewRNG(1)}
	in := tensor.FromSlice(dev, ids, b, len(ids)/b)
	logits := m.ForwardDocuments(p, in, d) // [B, T, Vp/tp]
	if backward {
		_, per := m.Loss(p, logits, tensor.FromSlice(dev, labels, b, len(ids)/b))
		tensor.Sum(per).Backward()
	}
	full := tensor.ToSlice[float64](parallel.GatherFromTP(p.Ctx, c, logits.Detach())) // [B, T, Vp]
	rows := make([][]float64, len(ids))
	for i := range rows {
		rows[i] = full[i*m.Vp : (i+1)*m.Vp]
	}
	return rows
}

// TestGPTPackedDocumentsEqualSeparate: documents packed into the sequences of one batch,
// with their positions restarting and attention kept inside each (Documents), give every
// token the logits it has when each document runs alone, and (at TP=1) the gradients of
// the per-token losses summed over the documents: what --reset-position-ids with
// --reset-attention-mask promise. Learned positions and RoPE (per-sample rotation: the
// two samples' positions differ), fused and unfused attention, TP=2 with sequence
// parallelism, activation recomputation.
func TestGPTPackedDocumentsEqualSeparate(t *testing.T) {
	gpt2 := GPTConfig{TransformerConfig: TransformerConfig{NumLayers: 2, Hidden: 16, Heads: 4, Vocab: 50,
		MaxPosition: 8, Bias: true}, VocabMultiple: 1}
	llama := LlamaConfig(2, 16, 4, 2, 24, 50)
	llama.VocabMultiple = 1
	// Two samples of 8 tokens: documents of 6 and 2 tokens, and one of 8 (even lengths:
	// sequence parallelism splits each alone in two).
	docs := [][]int64{{3, 17, 2, 9, 42, 11}, {5, 0}, {7, 7, 1, 8, 44, 31, 30, 29}}
	labels := [][]int64{{17, 2, 9, 42, 11, 5}, {0, 7}, {7, 1, 8, 44, 31, 30, 29, 28}}
	segs := []int32{0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0}
	pos := []int32{0, 1, 2, 3, 4, 5, 0, 1, 0, 1, 2, 3, 4, 5, 6, 7}
	for _, tc := range []struct {
		name      string
		cfg       GPTConfig
		tp        int
		unfused   bool
		recompute Recompute
	}{
		{"learned", gpt2, 1, false, RecomputeNone},
		{"rope_gqa", llama, 1, false, RecomputeNone},
		{"rope_unfused_recompute_selective", llama, 1, true, RecomputeSelective},
		{"learned_recompute_full", gpt2, 1, false, RecomputeFull},
		{"learned_tp2_sp", gpt2, 2, false, RecomputeNone},
		{"rope_tp2_sp", llama, 2, false, RecomputeNone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runs := onRanks(t, tc.tp, func(c parallel.Comm, dev *tensor.Device) ([2]packedRun, error) {
				var res [2]packedRun // packed, separate
				for k := range res {
					b := &Builder{Dev: dev, DType: tensor.F64, RNG: tensor.NewRNG(7), TP: c, SequenceParallel: c.Size() > 1,
						Unfused: tc.unfused, Recompute: tc.recompute}
					m, err := NewGPT(b, tc.cfg, Stage{})
					if err != nil {
						return res, err
					}
					if k == 0 {
						var ids, lab []int64
						for i := range docs {
							ids, lab = append(ids, docs[i]...), append(lab, labels[i]...)
						}
						d := Documents{Positions: tensor.FromSlice(dev, pos, 2, 8), Segments: tensor.FromSlice(dev, segs, 2, 8)}
						res[k].logits = gptTokens(t, c, m, ids, lab, 2, d, c.Size() == 1)
					} else {
						for i := range docs {
							res[k].logits = append(res[k].logits, gptTokens(t, c, m, docs[i], labels[i], 1, Documents{}, c.Size() == 1)...)
						}
					}
					res[k].grads = map[string][]float64{}
					for _, q := range m.Params() {
						if g := q.Grad(); g != nil {
							res[k].grads[q.Name] = tensor.ToSlice[float64](g)
						}
					}
				}
				return res, nil
			})
			for r, run := range runs {
				packed, separate := run[0], run[1]
				for i := range packed.logits {
					// float64; attention over the same keys, sums in another order
					require.InDeltaSlice(t, separate.logits[i], packed.logits[i], 1e-12, fmt.Sprintf("rank %d token %d", r, i))
				}
				require.Len(t, packed.grads, len(separate.grads))
				for name, g := range separate.grads {
					require.InDeltaSlice(t, g, packed.grads[name], 1e-11, name) // sums in another order
				}
			}
		})
	}
}

// TestRoPEPerSamplePositions: each sample is rotated by its own positions, as the loop
// rotates it alone.
func TestRoPEPerSamplePositions(t *testing.T) {
	const b, h, tt, hs = 2, 2, 4, 8
	rows := [][]int{{0, 1, 0, 1}, {0, 1, 2, 3}}
	c := TransformerConfig{Hidden: hs * h, Heads: h, Position: RoPE, RoPETheta: 50, RotaryPercent: 0.5}.Defaults()
	inv := llama31InvFreq(4, 50, 1)
	for _, ops := range []layerOps{fusedOps, referenceOps} {
		dev := tensor.NewCPU()
		q := tensor.NewRNG(3).Normal(dev, tensor.F64, tensor.Whole(b, h, tt, hs), 0, 1)
		got, _ := ropeFor(c, ops)(q, q, AttentionMask{PositionIDs: rows}, 0)
		x, y := tensor.ToSlice[float64](q), tensor.ToSlice[float64](got)
		n := h * tt * hs // one sample
		for i, r := range rows {
			require.InDeltaSlice(t, slowRoPE(x[i*n:(i+1)*n], 1, h, tt, hs, 4, r, inv), y[i*n:(i+1)*n], 1e-12)
		}
	}
}
