package nn_test

import (
	"context"
	"fmt"
	"math"

	"megago/nn"
	"megago/parallel"
	"megago/tensor"
)

// A tiny T5 (v1.0) on one rank: encode a padded batch, decode the shifted labels, and
// take the loss. The same code runs tensor-parallel when the Builder's TP group has more
// ranks; pipeline stages are not supported for T5.
func ExampleNewT5() {
	cfg := nn.NewT5Config(2, 16, 4, 4, 32, 50) // layers, d_model, heads, d_kv, d_ff, vocab
	cfg.VocabMultiple = 1
	b := &nn.Builder{Dev: tensor.NewCPU(), DType: tensor.F32, RNG: tensor.NewRNG(1234), TP: parallel.Self()}
	m, err := nn.NewT5(b, cfg, nn.Stage{})
	if err != nil {
		fmt.Println(err)
		return
	}
	n := 0
	for _, p := range m.Params() {
		n += p.Numel()
	}
	// Shared embedding 800; per stack a relative bias 32·4 and a final norm 16; encoder
	// layers 2·2080, decoder layers (with cross-attention) 2·3120.
	fmt.Println("parameters:", n)

	dev := b.Dev
	labels := tensor.FromSlice(dev, []int32{5, 6, 7, 1, 8, 9, -100, -100}, 2, 4) // [B, Td]
	in := nn.T5Input{
		IDs:        tensor.FromSlice(dev, []int32{10, 11, 12, 1, 13, 14, 0, 0}, 2, 4), // [B, Te]
		Attend:     tensor.FromSlice(dev, []int32{1, 1, 1, 1, 1, 1, 0, 0}, 2, 4),
		DecoderIDs: nn.T5ShiftRight(labels, 0, 0),
	}
	p := nn.Eval(context.Background())
	logits := m.Forward(p, in) // [B, Td, Vp/tp]
	loss, _ := m.Loss(p, logits, labels)
	loss.Backward()
	fmt.Printf("loss %.1f, ln V %.1f\n", loss.Item(), math.Log(50))

	_, err = nn.NewT5(b, cfg, nn.Stage{PreProcess: true, NumLayers: 1})
	fmt.Println(err != nil)
	// Output:
	// parameters: 11488
	// loss 3.9, ln V 3.9
	// true
}
