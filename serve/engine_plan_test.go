package serve

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPlanStepSize: a step that prefills carries PrefillChunk tokens in all, decoding
// ones included, while prompts have tokens left, and at least half of PrefillChunk
// prompt tokens however many requests decode.
func TestPlanStepSize(t *testing.T) {
	for _, tc := range []struct {
		chunk, decoding, prompts int // prompts of 100 tokens each wait to be prefilled
		wantTokens, wantPrompt   int
	}{
		{chunk: 512, decoding: 32, prompts: 8, wantTokens: 512, wantPrompt: 480},
		{chunk: 512, decoding: 0, prompts: 8, wantTokens: 512, wantPrompt: 512},
		{chunk: 512, decoding: 5, prompts: 2, wantTokens: 205, wantPrompt: 200}, // the prompts run out
		{chunk: 16, decoding: 30, prompts: 2, wantTokens: 38, wantPrompt: 8},    // half of 16
		{chunk: 5, decoding: 4, prompts: 1, wantTokens: 7, wantPrompt: 3},       // half of 5, rounded up
	} {
		t.Run(fmt.Sprintf("chunk%d-decoding%d", tc.chunk, tc.decoding), func(t *testing.T) {
			e := &Engine{cfg: EngineConfig{PrefillChunk: tc.chunk}}
			var running []*seq
			for i := range tc.decoding + tc.prompts {
				s := newSeq(context.Background(), Request{Prompt: make([]int32, 100), MaxNewTokens: 4})
				s.slot = i
				if i < tc.decoding {
					s.tokens, s.fed, s.generations = append(s.tokens, 0), len(s.tokens), 1 // its first token is pending
				}
				running = append(running, s)
			}
			p := e.plan(running)
			prompt := 0
			for i, d := range p.seqs {
				if p.owners[i].prefilling() {
					prompt += d.N
				}
			}
			require.Len(t, p.ids, tc.wantTokens, "tokens of the step")
			require.Equal(t, tc.wantPrompt, prompt, "prompt tokens of the step")
		})
	}
}
