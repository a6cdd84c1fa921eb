package serve

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"megago/nn"
)

// generateOnRanks runs nn.Generate on every rank of models (goroutine ranks) and returns
// rank 0's tokens.
func generateOnRanks(t *testing.T, models []*nn.GPT, prompts [][]int32, o nn.GenerateOptions) [][]int32 {
	t.Helper()
	out := make([][][]int32, len(models))
	var wg sync.WaitGroup
	for i, m := range models {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g, err := nn.Generate(context.Background(), m, prompts, o)
			if err != nil {
				t.Error(err)
			}
			out[i] = g
		}()
	}
	wg.Wait()
	return out[0]
}

// TestEngineMatchesGenerate: the engine's tokens equal nn.Generate's for the same
// prompts, greedy and sampled (a request draws as Generate's row 0 does), at TP 1 and 2.
func TestEngineMatchesGenerate(t *testing.T) {
	const newTokens = 6
	prompts := variedPrompts(6, 12, 100, 3)
	for name, cfg := range testConfigs() {
		for _, tp := range []int{1, 2} {
			t.Run(fmt.Sprintf("%s/tp%d", name, tp), func(t *testing.T) {
				models := testModels(t, cfg, tp)
				e := testEngine(t, models, EngineConfig{MaxRequests: 4, MaxSeqLen: 32, PrefillChunk: 5})
				greedy := generateOnRanks(t, models, prompts, nn.GenerateOptions{MaxNewTokens: newTokens})
				var reqs []Request
				for _, p := range prompts {
					reqs = append(reqs, Request{Prompt: p, MaxNewTokens: newTokens})
				}
				for i, r := range submitAll(t, e, reqs) {
					require.Equal(t, greedy[i], r.ids, "greedy prompt %d", i)
					require.Equal(t, "length", r.done.FinishReason)
				}
				s := Sampling{Temperature: 1.5, TopK: 20, TopP: 0.9, Seed: 42}
				o := nn.GenerateOptions{MaxNewTokens: newTokens, Temperature: s.Temperature, TopK: s.TopK, TopP: s.TopP, Seed: s.Seed}
				reqs = reqs[:0]
				for _, p := range prompts {
					reqs = append(reqs, Request{Prompt: p, MaxNewTokens: newTokens, Sampling: s})
				}
				for i, r := range submitAll(t, e, reqs) {
					want := generateOnRanks(t, models, prompts[i:i+1], o)[0]
					require.Equal(t, want, r.ids, "sampled prompt %d", i)
				}
			})
		}
	}
}

// TestEngineBatchIndependent: 32 prompts of varied lengths, run together (8 slots, so
// requests join and leave at every step; prompts prefilled in chunks beside decoding),
// give bit for bit the ids and log-probabilities each gives alone.
func TestEngineBatchIndependent(t *testing.T) {
	cfg := testConfigs()["llama-gqa"]
	models := testModels(t, cfg, 1)
	prompts := variedPrompts(32, 24, cfg.Vocab, 5)
	// Two long prompts cross attention's query (64) and key (128) tiles.
	prompts[3], prompts[10] = variedPrompts(1, 1, cfg.Vocab, 6)[0], make([]int32, 260)
	prompts[3] = append(prompts[3], make([]int32, 149)...)
	for i := range prompts[10] {
		prompts[10][i] = int32(i * 7 % cfg.Vocab)
	}
	reqs := make([]Request, len(prompts))
	for i, p := range prompts {
		reqs[i] = Request{Prompt: p, MaxNewTokens: 2 + i%7, Logprobs: true, TopLogprobs: 3, PromptLogprobs: i%3 == 0}
		if i%4 == 1 { // sampled requests draw from their own seed
			reqs[i].Sampling = Sampling{Temperature: 0.8, TopP: 0.95, TopPDecay: 0.9, TopPBound: 0.5, Seed: uint64(i)}
		}
	}
	alone := testEngine(t, models, EngineConfig{MaxRequests: 1, MaxSeqLen: 300})
	want := make([]result, len(reqs))
	for i, r := range reqs {
		want[i] = submitAll(t, alone, []Request{r})[0]
	}
	require.NoError(t, alone.Close())
	for _, ec := range []EngineConfig{
		{MaxRequests: 8, MaxSeqLen: 300, PrefillChunk: 7},
		{MaxRequests: 32, MaxSeqLen: 300},
	} {
		mixed := testEngine(t, models, ec)
		got := submitAll(t, mixed, reqs)
		for i := range reqs {
			require.Equal(t, want[i].ids, got[i].ids, "%+v: prompt %d ids", ec, i)
			require.Equal(t, want[i].logprobs, got[i].logprobs, "%+v: prompt %d logprobs", ec, i)
			require.Equal(t, want[i].top, got[i].top, "%+v: prompt %d top logprobs", ec, i)
			require.Equal(t, want[i].prompt, got[i].prompt, "%+v: prompt %d prompt logprobs", ec, i)
		}
		require.NoError(t, mixed.Close())
	}
}
