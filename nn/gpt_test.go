package nn

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"megago/parallel"
	"megago/tensor"
)

func TestGPTParamCountCheckValue(t *testing.T) {
	// MEGATRON-FACTS: 2 layers, hidden 12, 4 heads, vocab 100, 4 positions, untied,
	// biases, LayerNorm: 6240 parameters (vocabulary not padded).
	cfg := GPTConfig{TransformerConfig: TransformerConfig{NumLayers: 2, Hidden: 12, Heads: 4, Vocab: 100,
		MaxPosition: 4, Bias: true}, Untied: true, VocabMultiple: 1}
	m, err := NewGPT(testBuilder(parallel.Self(), false), cfg, Stage{})
	require.NoError(t, err)
	n := 0
	for _, p := range m.Params() {
		n += p.Numel()
	}
	require.Equal(t, 6240, n)
}

func testBuilder(tp parallel.Comm, sp bool) *Builder {
	return &Builder{Dev: tensor.NewCPU(), DType: tensor.F64, RNG: tensor.NewRNG(7), TP: tp, SequenceParallel: sp}
}

// gptRun builds a GPT on each of tp goroutine ranks, runs forward and backward on the same
// batch and returns, per rank, the loss, the full logits (gathered) and each parameter's
// gradient by name.
type gptResult struct {
	loss   float64
	logits []float64
	grads  map[string]*Param
}

func runGPT(t *testing.T, cfg GPTConfig, tp int, sp, train bool) []gptResult {
	t.Helper()
	out := make([]gptResult, tp)
	var mu sync.Mutex
	ids := []int64{3, 17, 2, 99, 42, 5, 0, 64, 64, 1, 8, 77, 31, 30, 29, 28}
	labels := []int64{17, 2, 99, 42, 5, 0, -100, 64, 1, 8, 77, 31, 30, -100, 28, 3}
	err := parallel.RunLocal(tp, func(c parallel.Comm) error {
		b := testBuilder(c, sp)
		m, err := NewGPT(b, cfg, Stage{})
		if err != nil {
			return err
		}
		p := &Pass{Ctx: context.Background(), Train: train, RNG: tensor.NewRNG(99)}
		in := tensor.FromSlice(b.Dev, ids, 2, 8)
		logits := m.Forward(p, in, nil)
		loss, _ := m.Loss(p, logits, tensor.FromSlice(b.Dev, labels, 2, 8))
		loss.Backward()
		if err := ReduceSequenceParallelGrads(p.Ctx, c, m.Params()); err != nil {
			return err
		}
		full := parallel.GatherFromTP(p.Ctx, c, logits.Detach())
		g := map[string]*Param{}
		for _, q := range m.Params() {
			g[q.Name] = q
		}
		mu.Lock()
		out[c.Rank()] = gptResult{loss: loss.Item(), logits: tensor.ToSlice[float64](full), grads: g}
		mu.Unlock()
		return nil
	})
	require.NoError(t, err)
	return out
}

func TestGPTTensorParallelEquivalence(t *testing.T) {
	base := GPTConfig{TransformerConfig: TransformerConfig{NumLayers: 2, Hidden: 16, Heads: 4, Vocab: 100,
		MaxPosition: 8, Bias: true, Dropout: 0.1, AttnDropout: 0.1}, VocabMultiple: 1}
	llama := LlamaConfig(2, 16, 4, 4, 24, 100)
	llama.VocabMultiple = 1
	gqa := LlamaConfig(2, 16, 4, 2, 24, 100)
	gqa.VocabMultiple = 1
	// Megatron's variants: Qwen2's QKV bias, query/key norms, partial and Llama-3.1-scaled
	// rotary embeddings, and no positions at all.
	variants := gqa
	variants.QKVBias, variants.QKNorm, variants.RotaryPercent, variants.RoPEScaling = true, true, 0.5, 8
	noPos := gqa
	noPos.Position, noPos.Norm, noPos.QKNorm = NoPositions, LayerNormKind, true
	for _, tc := range []struct {
		name  string
		cfg   GPTConfig
		sp    bool
		train bool
	}{
		{"gpt2", base, false, false},
		{"gpt2-dropout", base, false, true},
		{"gpt2-sp-dropout", base, true, true},
		{"llama", llama, false, false},
		{"llama-sp", llama, true, false},
		{"llama-gqa", gqa, false, false},
		{"llama-variants", variants, false, false},
		{"llama-variants-sp", variants, true, false},
		{"no-positions-qk-layernorm", noPos, false, false},
	} {
		ref := runGPT(t, tc.cfg, 1, false, tc.train)[0]
		for _, tp := range []int{2, 4} {
			if tc.cfg.KVHeads%tp != 0 {
				continue // grouped-query attention splits whole groups
			}
			t.Run(fmt.Sprintf("%s/tp%d", tc.name, tp), func(t *testing.T) {
				got := runGPT(t, tc.cfg, tp, tc.sp, tc.train)
				for r, g := range got {
					// All-reduces and split matmuls reorder float64 sums.
					require.InDelta(t, ref.loss, g.loss, 1e-12, "rank %d loss", r)
					require.InDeltaSlice(t, ref.logits, g.logits, 1e-12, "rank %d logits", r)
					for name, p := range g.grads {
						want := ref.grads[name]
						require.NotNil(t, want, name)
						grad := p.Grad()
						full := tensor.ToSlice[float64](want.Grad().Narrow(max(p.PartitionDim, 0), p.Start()[max(p.PartitionDim, 0)], p.Shape()[max(p.PartitionDim, 0)]))
						require.InDeltaSlice(t, full, tensor.ToSlice[float64](grad), 1e-12, "rank %d grad %s", r, name)
					}
				}
			})
		}
	}
}
