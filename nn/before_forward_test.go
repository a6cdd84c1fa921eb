package nn

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"megago/parallel"
	"megago/tensor"
)

// TestBeforeForwardPrecedesEveryRead: every parameter's BeforeForward hook runs before
// the forward pass reads it. Each parameter is overwritten with NaN and its hook puts
// the value back, as the overlapped parameter all-gather completes a bucket: the output
// is then bit-identical to the plain forward pass only if no parameter was read before
// its hook ran.
func TestBeforeForwardPrecedesEveryRead(t *testing.T) {
	ids := []int64{3, 17, 2, 9, 31, 5, 7, 1, 9, 1, 8, 7, 30, 0, 4, 6}
	gpt := func(untied bool, pos Position) func(b *Builder) (Module, func(*Pass) *tensor.Tensor) {
		return func(b *Builder) (Module, func(*Pass) *tensor.Tensor) {
			cfg := GPTConfig{TransformerConfig: TransformerConfig{NumLayers: 2, Hidden: 8, Heads: 2, Vocab: 32,
				MaxPosition: 8, Bias: true, Position: pos}, Untied: untied, VocabMultiple: 1}
			m, err := NewGPT(b, cfg, Stage{})
			require.NoError(t, err)
			return m, func(p *Pass) *tensor.Tensor { return m.Forward(p, tensor.FromSlice(b.Dev, ids, 2, 8), nil) }
		}
	}
	bertInput := func(dev *tensor.Device) BERTInput { return BERTInput{IDs: tensor.FromSlice(dev, ids, 2, 8)} }
	bert := func(postLN bool) func(b *Builder) (Module, func(*Pass) *tensor.Tensor) {
		return func(b *Builder) (Module, func(*Pass) *tensor.Tensor) {
			cfg := NewBERTConfig(2, 8, 2, 32, 8)
			cfg.VocabMultiple, cfg.PostLN = 1, postLN
			m, err := NewBERT(b, cfg, Stage{})
			require.NoError(t, err)
			return m, func(p *Pass) *tensor.Tensor {
				out := m.Forward(p, bertInput(b.Dev))
				return tensor.Add(tensor.Sum(out.LMLogits), tensor.Sum(out.BinaryLogits))
			}
		}
	}
	for _, tc := range []struct {
		name  string
		build func(b *Builder) (Module, func(*Pass) *tensor.Tensor)
	}{
		{"gpt-tied", gpt(false, LearnedPositions)},
		{"gpt-untied-rope", gpt(true, RoPE)},
		{"bert-postln", bert(true)},
		{"bert-preln", bert(false)},
		{"bert-classifier", func(b *Builder) (Module, func(*Pass) *tensor.Tensor) {
			cfg := NewBERTConfig(2, 8, 2, 32, 8)
			cfg.VocabMultiple, cfg.PostLN = 1, false
			m, err := NewBERTClassifier(b, cfg, 3, Stage{})
			require.NoError(t, err)
			return m, func(p *Pass) *tensor.Tensor { _, logits := m.Forward(p, bertInput(b.Dev)); return logits }
		}},
		{"t5", func(b *Builder) (Module, func(*Pass) *tensor.Tensor) {
			cfg := NewT5Config(2, 8, 2, 4, 16, 32)
			cfg.VocabMultiple = 1
			m, err := NewT5(b, cfg, Stage{})
			require.NoError(t, err)
			return m, func(p *Pass) *tensor.Tensor {
				return m.Forward(p, T5Input{IDs: tensor.FromSlice(b.Dev, ids, 2, 8), DecoderIDs: tensor.FromSlice(b.Dev, ids[:8], 2, 4)})
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dev := tensor.NewCPU()
			m, forward := tc.build(&Builder{Dev: dev, DType: tensor.F64, RNG: tensor.NewRNG(3), TP: parallel.Self()})
			p := Eval(t.Context())
			want := tensor.ToSlice[float64](forward(p))
			ps := m.Params()
			for _, prm := range ps {
				saved := prm.Tensor.Clone()
				dev.Backend().Fill(prm.Tensor.Span(), math.NaN())
				prm.SetBeforeForward(func() { prm.Tensor.CopyFrom(saved); prm.SetBeforeForward(nil) })
			}
			got := tensor.ToSlice[float64](forward(p))
			require.Equal(t, want, got, "a parameter was read before its BeforeForward hook ran")
			for _, prm := range ps {
				require.False(t, math.IsNaN(tensor.ToSlice[float64](prm.Tensor)[0]), "%s: its hook never ran", prm.Name)
			}
		})
	}
}
