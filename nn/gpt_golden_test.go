package nn

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"megago/internal/golden"
	"megago/tensor"
)

// The GPT-2 and Llama models of testdata/golden (written by hand to Hugging Face
// semantics in PyTorch by gen.py) are loaded through FromHF and must give PyTorch's
// logits, loss and every parameter gradient (converted back with ToHF).
func TestGPTGolden(t *testing.T) {
	for _, tc := range []struct {
		file  string
		fused []tensor.FusedOp // besides attention, add-norm and bias-dropout-add
		cfg   func(f *golden.File) GPTConfig
	}{
		{"testdata/golden/gpt2.json", []tensor.FusedOp{tensor.FusedBiasGeLU}, func(f *golden.File) GPTConfig {
			return GPTConfig{TransformerConfig: TransformerConfig{
				NumLayers: f.ConfigInt("n_layer"), Hidden: f.ConfigInt("n_embd"), Heads: f.ConfigInt("n_head"),
				FFNHidden: f.ConfigInt("n_inner"), Vocab: f.ConfigInt("vocab_size"), MaxPosition: f.ConfigInt("n_positions"),
				NormEps: f.ConfigFloat("layer_norm_epsilon"), Bias: true}}
		}},
		{"testdata/golden/llama.json", []tensor.FusedOp{tensor.FusedBiasSwiGLU, tensor.FusedRoPE}, func(f *golden.File) GPTConfig {
			c := LlamaConfig(f.ConfigInt("num_hidden_layers"), f.ConfigInt("hidden_size"), f.ConfigInt("num_attention_heads"),
				f.ConfigInt("num_key_value_heads"), f.ConfigInt("intermediate_size"), f.ConfigInt("vocab_size"))
			c.NormEps = f.ConfigFloat("rms_norm_eps")
			c.RoPETheta = f.ConfigFloat("rope_theta")
			return c
		}},
	} {
		f, err := golden.Load(tc.file)
		require.NoError(t, err)
		cfg := tc.cfg(f)
		for _, gc := range testGrid(opsVariants, []int{1, 2}) {
			tp := gc.tp
			t.Run(f.Model+"/"+gc.ops.name+"/tp"+string(rune('0'+tp)), func(t *testing.T) {
				// The ranks only run the model; the comparisons are made here, on the test
				// goroutine, so that a failure stops the test at once.
				run := runRanks(t, tp, false, func() *Pass { return Eval(context.Background()) }, tensor.F32,
					func(b *Builder) (hfModel, error) { b.Unfused = gc.ops.unfused; return NewGPT(b, cfg, Stage{}) },
					func(m hfModel) (map[string]*tensor.Tensor, error) {
						return m.FromHF(goldenParams(m.Params()[0].Device(), f))
					},
					func(p *Pass, mm hfModel) (*tensor.Tensor, *tensor.Tensor, map[string]*tensor.Tensor) {
						m := mm.(*GPT)
						dev := m.Word.Weight.Device()
						logits := m.Forward(p, goldenInts(dev, f.Input("input_ids")), nil)
						loss, _ := m.Loss(p, logits, goldenInts(dev, f.Input("labels")))
						return logits, loss, nil
					})
				// At TP>1 the all-reduce of partial products reorders fp32 sums once more:
				// logits near zero may move by a few ulps of the larger partial sums.
				atol := goldenAtol
				if tp > 1 {
					atol = 4e-6
				}
				requireCloseTol(t, "logits", narrowLast(run.logits, cfg.Vocab), f.Logits.Data, goldenRtol, atol)
				requireClose(t, "loss", []float64{run.loss}, []float32{float32(f.Loss)})
				requireFusedRan(t, run, gc.ops.unfused, append(tc.fused, tensor.FusedAttention, tensor.FusedAddNorm, tensor.FusedBiasDropoutAdd)...)
				if tp > 1 {
					return // gradients are compared at TP=1; TP equivalence is tested elsewhere
				}
				hf, err := run.model.ToHF(globalGrads(t, run.params))
				require.NoError(t, err)
				for name := range f.Grads {
					g, ok := hf[name]
					require.True(t, ok, "no gradient for %s", name)
					requireClose(t, "grad "+name, tensor.ToSlice[float64](g), f.Grad(name).Data)
				}
			})
		}
	}
}
