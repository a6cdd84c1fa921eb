package nn

import (
	"context"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"megago/parallel"
	"megago/tensor"
)

// TestLayerAttentionMemory: a GPT layer at T = 2048, forward and backward with dropout,
// allocates no per-head [T, T] tensor when built with the fused ops. One float32 [T, T]
// matrix is 16 MiB; everything else the layer holds at B = 1, C = 32, F = 128 is a few
// [T, C] or [T, F] activations (0.25-1 MiB each) and the attention's per-tile scratch, so
// the device storage the step adds and all it allocates on the Go heap stay below one
// [T, T] matrix. The same layer built unfused (the reference) exceeds both bounds, which
// shows the test can see a [T, T] tensor.
func TestLayerAttentionMemory(t *testing.T) {
	const tlen, square = 2048, 2048 * 2048 * 4
	cfg := TransformerConfig{NumLayers: 1, Hidden: 32, Heads: 2, FFNHidden: 128, Vocab: 16, MaxPosition: tlen,
		Bias: true, Dropout: 0.1, AttnDropout: 0.1}
	for _, tc := range []struct {
		name    string
		unfused bool
	}{{"fused", false}, {"unfused", true}} {
		t.Run(tc.name, func(t *testing.T) {
			dev := tensor.NewCPU()
			b := &Builder{Dev: dev, DType: tensor.F32, RNG: tensor.NewRNG(3), TP: parallel.Self(), Unfused: tc.unfused}
			layer := NewTransformerLayer(b, "layers.0", cfg, false)
			x := tensor.Random(dev, tensor.F32, tensor.NewRNG(4), tensor.DistNormal, 0, 1,
				tensor.Whole(1, tlen, cfg.Hidden)).Keep()
			step := func() {
				s := dev.NewScope()
				defer s.Close()
				p := &Pass{Ctx: context.Background(), Train: true, RNG: tensor.NewRNG(5)}
				y := layer.Forward(p, x, LayerInput{Self: AttentionMask{Causal: true}})
				tensor.Sum(tensor.Mul(y, y)).Backward()
			}
			step() // fills the device's pool
			inUse := dev.Stats().InUse
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			step()
			runtime.ReadMemStats(&after)
			added, heap := dev.Stats().Peak-inUse, after.TotalAlloc-before.TotalAlloc
			if tc.unfused {
				require.Greater(t, added, int64(square), "the unfused layer holds [T, T] probabilities")
				return
			}
			require.Equal(t, int64(2), dev.FusedCount(tensor.FusedAttention), "the fused attention ran")
			require.Less(t, added, int64(square), "device storage added by forward and backward")
			require.Less(t, heap, uint64(square), "Go heap allocated by forward and backward")
		})
	}
}
