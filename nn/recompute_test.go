package nn

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"megago/parallel"
	"megago/tensor"
)

type recomputeResult struct {
	loss  float64
	grads map[string][]float64
	held  int64 // bytes held between forward and backward, beyond the parameters
}

// runRecompute runs a GPT forward and backward with dropout on tp ranks under r and
// returns rank 0's loss, every rank's gradients by name and rank, and the activation
// memory held between forward and backward.
func runRecompute(t *testing.T, cfg GPTConfig, tp int, sp bool, r Recompute) recomputeResult {
	t.Helper()
	res := recomputeResult{grads: map[string][]float64{}}
	var mu sync.Mutex
	err := parallel.RunLocal(tp, func(c parallel.Comm) error {
		b := testBuilder(c, sp)
		b.Recompute = r
		m, err := NewGPT(b, cfg, Stage{})
		if err != nil {
			return err
		}
		ids := tensor.FromSlice(b.Dev, []int64{3, 17, 2, 9, 42, 5, 0, 44, 14, 1, 8, 37, 31, 30, 29, 28}, 2, 8)
		labels := tensor.FromSlice(b.Dev, []int64{17, 2, 9, 42, 5, 0, -100, 44, 1, 8, 37, 31, 30, -100, 28, 3}, 2, 8)
		s := b.Dev.NewScope()
		defer s.Close()
		before := b.Dev.Stats().InUse
		p := &Pass{Ctx: context.Background(), Train: true, RNG: tensor.NewRNG(99)}
		loss, _ := m.Loss(p, m.Forward(p, ids, nil), labels)
		held := b.Dev.Stats().InUse - before
		loss.Backward()
		if err := ReduceSequenceParallelGrads(p.Ctx, c, m.Params()); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		if c.Rank() == 0 {
			res.loss, res.held = loss.Item(), held
		}
		for _, q := range m.Params() {
			res.grads[fmt.Sprintf("%s@%d", q.Name, c.Rank())] = tensor.ToSlice[float64](q.Grad())
		}
		return nil
	})
	require.NoError(t, err)
	return res
}

// TestRecomputeBitIdentical: full and selective recomputation give the loss and every
// gradient of keeping all activations, bit for bit, with dropout on (the masks are
// replayed), at TP=1 and at TP=2 with sequence parallelism, for GPT-2 and Llama layers;
// and they hold less between forward and backward: full least, selective less than none.
func TestRecomputeBitIdentical(t *testing.T) {
	gpt2 := GPTConfig{TransformerConfig: TransformerConfig{NumLayers: 2, Hidden: 16, Heads: 4, Vocab: 50,
		MaxPosition: 8, Bias: true, Dropout: 0.1, AttnDropout: 0.1}, VocabMultiple: 1}
	llama := LlamaConfig(2, 16, 4, 2, 24, 50)
	llama.VocabMultiple, llama.Dropout, llama.AttnDropout = 1, 0.1, 0.1
	for _, tc := range []struct {
		name string
		cfg  GPTConfig
		tp   int
		sp   bool
	}{
		{"gpt2-tp1", gpt2, 1, false},
		{"gpt2-tp2-sp", gpt2, 2, true},
		{"llama-tp2", llama, 2, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			none := runRecompute(t, tc.cfg, tc.tp, tc.sp, RecomputeNone)
			sel := runRecompute(t, tc.cfg, tc.tp, tc.sp, RecomputeSelective)
			full := runRecompute(t, tc.cfg, tc.tp, tc.sp, RecomputeFull)
			for _, got := range []recomputeResult{sel, full} {
				assert.Equal(t, none.loss, got.loss)
				require.Len(t, got.grads, len(none.grads))
				for name, g := range none.grads {
					assert.Equal(t, g, got.grads[name], name)
				}
			}
			assert.Less(t, sel.held, none.held, "selective holds less than none")
			assert.Less(t, full.held, sel.held, "full holds less than selective")
		})
	}
}

// TestRecomputeT5: T5's relative position bias (which requires grad) and the decoder's
// encoder memory pass through recomputed layers: gradients are unchanged.
func TestRecomputeT5(t *testing.T) {
	cfg := NewT5Config(2, 16, 4, 4, 24, 100) // dropout 0.1 by default
	grads := map[Recompute]map[string][]float64{}
	for _, r := range []Recompute{RecomputeNone, RecomputeFull, RecomputeSelective} {
		b := testBuilder(parallel.Self(), false)
		b.Recompute = r
		m, err := NewT5(b, cfg, Stage{})
		require.NoError(t, err)
		p := &Pass{Ctx: context.Background(), Train: true, RNG: tensor.NewRNG(3)}
		labels := tensor.FromSlice(b.Dev, t5Batch.labels, 2, 4)
		logits := m.Forward(p, T5Input{IDs: tensor.FromSlice(b.Dev, t5Batch.ids, 2, 8), Attend: tensor.FromSlice(b.Dev, t5Batch.attend, 2, 8),
			DecoderIDs: T5ShiftRight(labels, 0, 0)})
		loss, _ := m.Loss(p, logits, labels)
		loss.Backward()
		grads[r] = map[string][]float64{}
		for _, q := range m.Params() {
			grads[r][q.Name] = tensor.ToSlice[float64](q.Grad())
		}
	}
	for _, r := range []Recompute{RecomputeFull, RecomputeSelective} {
		require.Len(t, grads[r], len(grads[RecomputeNone]))
		for name, g := range grads[RecomputeNone] {
			assert.Equal(t, g, grads[r][name], "%v: %s", r, name)
		}
	}
}

// TestRecomputeWithKVCache: a model built with recomputation still decodes with a KV
// cache (no backward, so nothing is recomputed) and gives the same logits.
func TestRecomputeWithKVCache(t *testing.T) {
	cfg := GPTConfig{TransformerConfig: TransformerConfig{NumLayers: 2, Hidden: 16, Heads: 4, Vocab: 50,
		MaxPosition: 8, Bias: true}, VocabMultiple: 1}
	var want []float64
	for _, r := range []Recompute{RecomputeNone, RecomputeFull, RecomputeSelective} {
		b := testBuilder(parallel.Self(), false)
		b.Recompute = r
		m, err := NewGPT(b, cfg, Stage{})
		require.NoError(t, err)
		caches := make([]*KVCache, cfg.NumLayers)
		for i := range caches {
			caches[i] = &KVCache{}
		}
		var got []float64
		b.Dev.NoGrad(func() {
			p := Eval(context.Background())
			m.Forward(p, tensor.FromSlice(b.Dev, []int64{3, 17, 2}, 1, 3), caches)
			got = tensor.ToSlice[float64](m.Forward(p, tensor.FromSlice(b.Dev, []int64{9}, 1, 1), caches))
		})
		if want == nil {
			want = got
			continue
		}
		assert.Equal(t, want, got, "%v", r)
	}
}
