package nn

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"megago/tensor"
)

// TestBERTLMPositions: with LMPositions, the MLM scores are the rows of the full scores at
// those positions, and the loss and every gradient are those of the full scores with
// every other label ignored, at TP = 1 and at TP = 2 with sequence parallelism.
func TestBERTLMPositions(t *testing.T) {
	cfg := NewBERTConfig(2, 16, 4, 100, 8)
	cfg.VocabMultiple = 1 // the same padding at every TP
	var positions, labels []int64
	for i, l := range bertBatch.lmLabels {
		if l != -100 {
			positions, labels = append(positions, int64(i)), append(labels, l)
		}
	}
	selected := func(p *Pass, mm hfModel) (*tensor.Tensor, *tensor.Tensor, map[string]*tensor.Tensor) {
		m := mm.(*BERT)
		dev := m.LMOutput.Weight.Device()
		in := classifyInput(dev)
		in.LMPositions = tensor.FromSlice(dev, positions, len(positions))
		out := m.Forward(p, in)
		total, _, _ := m.Loss(p, out, tensor.FromSlice(dev, labels, len(labels)), tensor.FromSlice(dev, bertBatch.binary, 2))
		return out.LMLogits, total, map[string]*tensor.Tensor{"binary": out.BinaryLogits}
	}
	build := func(b *Builder) (hfModel, error) { return NewBERT(b, cfg, Stage{}) }
	full := runRanks(t, 1, false, trainPass(true), tensor.F64, build, nil, bertStep)
	for _, tc := range []struct {
		tp int
		sp bool
	}{{1, false}, {2, true}, {2, false}} {
		t.Run(fmt.Sprintf("tp%d-sp%v", tc.tp, tc.sp), func(t *testing.T) {
			got := runRanks(t, tc.tp, tc.sp, trainPass(true), tensor.F64, build, nil, selected)
			// The same arithmetic on fewer rows; TP reorders float64 sums.
			const tol = 1e-12
			require.InDelta(t, full.loss, got.loss, tol)
			rows := tensor.ToSlice[float64](got.logits)
			all := tensor.ToSlice[float64](full.logits)
			v := full.logits.Dim(-1)
			for i, pos := range positions {
				require.InDeltaSlice(t, all[int(pos)*v:int(pos+1)*v], rows[i*v:(i+1)*v], tol, "row of position %d", pos)
			}
			want := globalGrads(t, full.params)
			for name, g := range globalGrads(t, got.params) {
				require.InDeltaSlice(t, tensor.ToSlice[float64](want[name]), tensor.ToSlice[float64](g), tol, name)
			}
		})
	}
}
