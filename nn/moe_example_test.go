package nn_test

import (
	"context"
	"fmt"
	"math"

	"megago/nn"
	"megago/parallel"
	"megago/tensor"
)

// An MoE block of 4 experts, top-2, spread over 2 expert-parallel goroutine ranks with
// the alltoall dispatcher, computes what the same block computes on one rank.
func ExampleNewMoE() {
	cfg := nn.TransformerConfig{NumLayers: 1, Hidden: 8, Heads: 2, FFNHidden: 16, Vocab: 16, Activation: nn.SwiGLU,
		MoE: nn.MoEConfig{NumExperts: 4, TopK: 2, FFNHidden: 6, Dispatcher: "alltoall", GroupedGEMM: true}}
	xs := make([]float64, 2*3*8)
	for i := range xs {
		xs[i] = math.Sin(float64(i))
	}
	run := func(g nn.ExpertGroups) (*nn.MoE, []float64) {
		b := &nn.Builder{Dev: tensor.NewCPU(), DType: tensor.F64, RNG: tensor.NewRNG(1), TP: parallel.Self(), Experts: g}
		m := nn.NewMoE(b, "layers.0.mlp", cfg)
		x := tensor.FromSlice(b.Dev, xs, 2, 3, 8) // [B, T, C]
		y := m.Forward(nn.Eval(context.Background()), x)
		return m, tensor.ToSlice[float64](y)
	}
	_, want := run(nn.ExpertGroups{})
	var ys [2][]float64
	var rank0 *nn.MoE
	_ = parallel.RunLocal(2, func(c parallel.Comm) error {
		m, y := run(nn.ExpertGroups{EP: c, TPEP: c}) // each rank: the same tokens, 2 of the 4 experts
		ys[c.Rank()] = y
		if c.Rank() == 0 {
			rank0 = m
		}
		return nil
	})
	for _, p := range rank0.Params() {
		fmt.Println(p.Name, p.Shape(), "of", p.GlobalShape)
	}
	fmt.Println("same as one rank:", fmt.Sprint(ys[0]) == fmt.Sprint(want) && fmt.Sprint(ys[1]) == fmt.Sprint(want))
	s := rank0.TakeStats()
	fmt.Println("micro-batches:", s.Micro, "routed tokens:", s.TokensPerExpert[0]+s.TokensPerExpert[1]+s.TokensPerExpert[2]+s.TokensPerExpert[3])
	// Output:
	// layers.0.mlp.router.weight [4 8] of [4 8]
	// layers.0.mlp.experts.gate.weight [2 6 8] of [4 6 8]
	// layers.0.mlp.experts.fc1.weight [2 6 8] of [4 6 8]
	// layers.0.mlp.experts.fc2.weight [2 8 6] of [4 8 6]
	// same as one rank: true
	// micro-batches: 1 routed tokens: 12
}
