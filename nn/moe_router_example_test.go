package nn_test

import (
	"context"
	"fmt"

	"megago/nn"
	"megago/parallel"
	"megago/tensor"
)

// A router sends each of four tokens to its top two of three experts, and a capacity
// factor of 0.5 (⌈4·2/3·0.5⌉ = 2 tokens per expert) drops what an expert cannot take:
// expert 0, chosen by three tokens, keeps the two with the highest probabilities.
func ExampleRouter() {
	b := &nn.Builder{Dev: tensor.NewCPU(), DType: tensor.F32, RNG: tensor.NewRNG(1), TP: parallel.Self()}
	cfg := nn.TransformerConfig{Hidden: 3, MoE: nn.MoEConfig{NumExperts: 3, TopK: 2, CapacityFactor: 0.5}}
	r := nn.NewRouter(b, "router", cfg)
	r.Weight.Tensor.CopyFrom(tensor.FromSlice(b.Dev, []float32{ // [E, C]: expert e scores channel e
		1, 0, 0,
		0, 1, 0,
		0, 0, 1,
	}, 3, 3))
	x := tensor.FromSlice(b.Dev, []float32{ // [B=1, T=4, C=3]
		2, 1, 0,
		3, 0, 1,
		0, 2, 1,
		1, 0, 2,
	}, 1, 4, 3)
	rt := r.Route(nn.Eval(context.Background()), x)
	probs := tensor.ToSlice[float32](rt.Probs) // [N, E]
	for n := range 4 {
		fmt.Printf("token %d:", n)
		for e := range 3 {
			if rt.Map[n*3+e] {
				fmt.Printf(" expert %d (%.3f)", e, probs[n*3+e])
			}
		}
		fmt.Println()
	}
	fmt.Println("routed before dropping:", rt.TokensPerExpert)
	// Output:
	// token 0: expert 0 (0.731) expert 1 (0.269)
	// token 1: expert 0 (0.881)
	// token 2: expert 1 (0.731) expert 2 (0.269)
	// token 3: expert 2 (0.731)
	// routed before dropping: [3 2 3]
}
