package serve

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"megago/nn"
	"megago/parallel"
	"megago/tensor"
)

// TestLeaderAndFollower runs the process-rank protocol on goroutine ranks: rank 0's
// engine broadcasts each step's plan, rank 1 follows, and the tokens equal nn.Generate's
// at TP 2.
func TestLeaderAndFollower(t *testing.T) {
	cfg := testConfigs()["llama-gqa"]
	prompts := variedPrompts(5, 10, cfg.Vocab, 8)
	const newTokens = 5
	err := parallel.RunLocal(2, func(c parallel.Comm) error {
		b := &nn.Builder{Dev: tensor.NewCPU(), DType: tensor.F32, RNG: tensor.NewRNG(7), TP: c}
		m, err := nn.NewGPT(b, cfg, nn.Stage{})
		if err != nil {
			return err
		}
		want, err := nn.Generate(context.Background(), m, prompts, nn.GenerateOptions{MaxNewTokens: newTokens})
		if err != nil {
			return err
		}
		if c.Rank() != 0 {
			return Follow(context.Background(), m, c)
		}
		e, err := NewLeaderEngine(m, c, EngineConfig{MaxRequests: 3, MaxSeqLen: 32, PrefillChunk: 4})
		if err != nil {
			return err
		}
		chans := make([]<-chan Event, len(prompts))
		for i, p := range prompts {
			if chans[i], err = e.Submit(context.Background(), Request{Prompt: p, MaxNewTokens: newTokens}); err != nil {
				return err
			}
		}
		for i, ch := range chans {
			var ids []int32
			for ev := range ch {
				if ev.Token != nil {
					ids = append(ids, ev.Token.ID)
				}
			}
			if !equalIDs(ids, want[i]) {
				t.Errorf("prompt %d: engine %v, Generate %v", i, ids, want[i])
			}
		}
		return e.Close()
	})
	require.NoError(t, err)
}

func equalIDs(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
