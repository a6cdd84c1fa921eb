package nn

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"megago/parallel"
	"megago/tensor"
)

// TestGPTStepMemory bounds the device storage a GPT training step adds at its peak, by
// shapes. At B·T = N = 256 tokens, V = 4096, C = 32, F = 128 and 2 layers, the float32
// logits [N, V] are 4 MiB; what backward needs besides them is, per layer, at most 12
// [N, C] and 2 [N, F] activations (640 KiB), the embedding and final norm's few [N, C], and
// the gradients flowing back, a few [N, F] at a time (under 1 MiB): 2 MiB of slack covers
// all of it. With LossConsuming the cross entropy writes the logits' gradient over them,
// so the step stays under logits + 2 MiB; with Loss, which keeps the logits for the
// caller, the gradient is a second logits-sized buffer, which shows the bound sees it.
func TestGPTStepMemory(t *testing.T) {
	const n, vocab = 256, 4096
	const logits, slack = n * vocab * 4, 2 << 20
	cfg := GPTConfig{TransformerConfig: TransformerConfig{NumLayers: 2, Hidden: 32, Heads: 2, FFNHidden: 128,
		Vocab: vocab, MaxPosition: n, Bias: true}}
	for _, tc := range []struct {
		name      string
		consuming bool
	}{{"LossConsuming", true}, {"Loss", false}} {
		t.Run(tc.name, func(t *testing.T) {
			dev := tensor.NewCPU()
			b := &Builder{Dev: dev, DType: tensor.F32, RNG: tensor.NewRNG(3), TP: parallel.Self()}
			m, err := NewGPT(b, cfg, Stage{})
			require.NoError(t, err)
			ids := make([]int64, n)
			for i := range ids {
				ids[i] = int64(i * 7 % vocab)
			}
			step := func() {
				s := dev.NewScope()
				defer s.Close()
				p := &Pass{Ctx: context.Background(), Train: true, RNG: tensor.NewRNG(5)}
				x, y := tensor.FromSlice(dev, ids, 1, n), tensor.FromSlice(dev, ids, 1, n)
				loss := m.Loss
				if tc.consuming {
					loss = m.LossConsuming
				}
				mean, _ := loss(p, m.Forward(p, x, nil), y)
				mean.Backward()
			}
			step() // allocates the parameters' gradients
			inUse := dev.Stats().InUse
			step()
			added := dev.Stats().Peak - inUse
			t.Logf("peak storage added by the step: %.2f MiB", float64(added)/(1<<20))
			if !tc.consuming {
				require.Greater(t, added, int64(2*logits), "the logits and their gradient")
				return
			}
			require.Less(t, added, int64(logits+slack), "device storage added by a training step")
		})
	}
}
