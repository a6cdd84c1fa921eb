package nn_test

import (
	"context"
	"fmt"
	"math"

	"megago/nn"
	"megago/parallel"
	"megago/tensor"
)

// Two documents packed into one sequence of 6 tokens, the first ending with an
// end-of-document token (0): with positions restarting and attention kept inside each
// document, the second document's logits are those it gets alone.
func ExampleGPT_ForwardDocuments() {
	cfg := nn.GPTConfig{TransformerConfig: nn.TransformerConfig{
		NumLayers: 2, Hidden: 16, Heads: 4, Vocab: 50, MaxPosition: 8, Bias: true,
	}, VocabMultiple: 1}
	b := &nn.Builder{Dev: tensor.NewCPU(), DType: tensor.F64, RNG: tensor.NewRNG(1), TP: parallel.Self()}
	m, err := nn.NewGPT(b, cfg, nn.Stage{})
	if err != nil {
		fmt.Println(err)
		return
	}
	p := nn.Eval(context.Background())
	packed := m.ForwardDocuments(p, tensor.FromSlice(b.Dev, []int32{7, 8, 0, 9, 10, 11}, 1, 6), nn.Documents{
		Positions: tensor.FromSlice(b.Dev, []int32{0, 1, 2, 0, 1, 2}, 1, 6), // [B, T]
		Segments:  tensor.FromSlice(b.Dev, []int32{0, 0, 0, 1, 1, 1}, 1, 6), // [B, T]
	}) // [B, T, Vp]
	alone := m.Forward(p, tensor.FromSlice(b.Dev, []int32{9, 10, 11}, 1, 3), nil) // [1, 3, Vp]
	second := tensor.ToSlice[float64](packed.Narrow(1, 3, 3))
	diff := 0.0
	for i, v := range tensor.ToSlice[float64](alone) {
		diff = math.Max(diff, math.Abs(v-second[i]))
	}
	fmt.Println("second document as alone:", diff < 1e-12)
	// Output:
	// second document as alone: true
}
