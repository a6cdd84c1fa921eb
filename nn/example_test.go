package nn_test

import (
	"context"
	"fmt"
	"math"

	"megago/nn"
	"megago/parallel"
	"megago/tensor"
)

// A tiny GPT-2 on one rank: forward, loss, backward, then greedy generation. The same
// code runs a tensor-parallel model when the Builder's TP group has more ranks.
func Example() {
	cfg := nn.GPTConfig{TransformerConfig: nn.TransformerConfig{
		NumLayers: 2, Hidden: 16, Heads: 4, Vocab: 50, MaxPosition: 32, Bias: true,
	}, VocabMultiple: 1}
	b := &nn.Builder{Dev: tensor.NewCPU(), DType: tensor.F32, RNG: tensor.NewRNG(1234), TP: parallel.Self()}
	m, err := nn.NewGPT(b, cfg, nn.Stage{})
	if err != nil {
		fmt.Println(err)
		return
	}
	n := 0
	for _, p := range m.Params() {
		n += p.Numel()
	}
	// Word 50·16 + positions 32·16 + 2 layers · (2 norms 2·32 + qkv 16·48+48 + proj
	// 16·16+16 + fc1 16·64+64 + fc2 64·16+16) + final norm 32 = 800 + 512 + 6560 + 32.
	fmt.Println("parameters:", n)

	p := &nn.Pass{Ctx: context.Background(), Train: true, RNG: tensor.NewRNG(1).Named("dropout")}
	ids := tensor.FromSlice(b.Dev, []int32{1, 2, 3, 4, 5, 6, 7, 8}, 2, 4)       // [B, T]
	labels := tensor.FromSlice(b.Dev, []int32{2, 3, 4, -100, 6, 7, 8, 9}, 2, 4) // [B, T]; -100 ignored
	s := b.Dev.NewScope()
	logits := m.Forward(p, ids, nil) // [B, T, Vp/tp]
	loss, _ := m.Loss(p, logits, labels)
	loss.Backward()
	// Near-uniform predictions at initialization: the loss is about ln V.
	l := loss.Item()
	fmt.Printf("loss %.1f, ln V %.1f, finite %v\n", l, math.Log(50), !math.IsNaN(l) && !math.IsInf(l, 0))
	s.Close()

	out, err := nn.Generate(context.Background(), m, [][]int32{{1, 2, 3}}, nn.GenerateOptions{MaxNewTokens: 4})
	fmt.Println("generated", len(out[0]), "tokens, error:", err)
	// Output:
	// parameters: 7904
	// loss 3.9, ln V 3.9, finite true
	// generated 4 tokens, error: <nil>
}

// Sampling with temperature, top-k and top-p: every TP rank passes the same prompts and
// options and gets the same tokens.
func ExampleGenerate() {
	cfg := nn.LlamaConfig(2, 16, 4, 2, 32, 50) // RoPE, grouped-query attention, SwiGLU
	err := parallel.RunLocal(2, func(tp parallel.Comm) error {
		b := &nn.Builder{Dev: tensor.NewCPU(), DType: tensor.F32, RNG: tensor.NewRNG(1), TP: tp}
		m, err := nn.NewGPT(b, cfg, nn.Stage{})
		if err != nil {
			return err
		}
		out, err := nn.Generate(context.Background(), m, [][]int32{{1, 2, 3}, {4, 5}},
			nn.GenerateOptions{MaxNewTokens: 5, Temperature: 0.8, TopK: 20, TopP: 0.9, Seed: 7})
		if err != nil {
			return err
		}
		if tp.Rank() == 0 {
			fmt.Println(len(out), "prompts,", len(out[0]), "and", len(out[1]), "new tokens")
		}
		return nil
	})
	fmt.Println("error:", err)
	// Output:
	// 2 prompts, 5 and 5 new tokens
	// error: <nil>
}
