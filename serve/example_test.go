package serve_test

import (
	"context"
	"fmt"

	"megago/nn"
	"megago/parallel"
	"megago/serve"
	"megago/tensor"
)

// An engine over a tiny random GPT on two goroutine TP ranks: one request streams its
// tokens, then a Done event.
func ExampleEngine() {
	cfg := nn.GPTConfig{TransformerConfig: nn.TransformerConfig{NumLayers: 2, Hidden: 16, Heads: 4, Vocab: 50, MaxPosition: 32}}
	models, release, err := serve.LocalTP(2, func(tp parallel.Comm) (*nn.GPT, error) {
		b := &nn.Builder{Dev: tensor.NewCPU(), DType: tensor.F32, RNG: tensor.NewRNG(1), TP: tp}
		return nn.NewGPT(b, cfg, nn.Stage{})
	})
	if err != nil {
		panic(err)
	}
	defer release()
	e, err := serve.NewEngine(models, serve.EngineConfig{MaxRequests: 4})
	if err != nil {
		panic(err)
	}
	defer e.Close()
	// 2 (K, V) · 2 layers · 4 slots · 2 heads per rank · 32 positions · 4 channels · 4 bytes
	fmt.Println("positions per slot:", e.MaxSeqLen(), "cache bytes per rank:", e.CacheBytes())

	events, err := e.Submit(context.Background(), serve.Request{Prompt: []int32{1, 2, 3}, MaxNewTokens: 5})
	if err != nil {
		panic(err)
	}
	n := 0
	for ev := range events {
		if ev.Token != nil {
			n++
		}
		if ev.Done {
			fmt.Println(n, "tokens, finished by", ev.FinishReason, ev.Stats.PromptTokens, "prompt tokens")
		}
	}
	// Output:
	// positions per slot: 32 cache bytes per rank: 16384
	// 5 tokens, finished by length 3 prompt tokens
}
