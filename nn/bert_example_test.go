package nn_test

import (
	"context"
	"fmt"
	"math"

	"megago/nn"
	"megago/parallel"
	"megago/tensor"
)

// A tiny BERT on one rank: masked-language-model and next-sentence losses on a padded
// batch. The same code runs tensor-parallel when the Builder's TP group has more ranks.
func ExampleNewBERT() {
	cfg := nn.NewBERTConfig(2, 16, 4, 50, 8) // Hugging Face BertForPreTraining semantics
	cfg.VocabMultiple = 1
	b := &nn.Builder{Dev: tensor.NewCPU(), DType: tensor.F32, RNG: tensor.NewRNG(1234), TP: parallel.Self()}
	m, err := nn.NewBERT(b, cfg, nn.Stage{})
	if err != nil {
		fmt.Println(err)
		return
	}
	n := 0
	for _, p := range m.Params() {
		n += p.Numel()
	}
	// Embeddings 50·16 + 8·16 + 2·16 + norm 32 = 992; 2 layers · 3280 = 6560; pooler 272,
	// MLM dense 272, norm 32, bias 50, binary head 34 = 660.
	fmt.Println("parameters:", n)

	dev := b.Dev
	in := nn.BERTInput{
		IDs:        tensor.FromSlice(dev, []int32{2, 7, 9, 11, 2, 13, 0, 0}, 2, 4), // [B, T]
		TokenTypes: tensor.FromSlice(dev, []int32{0, 0, 1, 1, 0, 1, 0, 0}, 2, 4),
		Attend:     tensor.FromSlice(dev, []int32{1, 1, 1, 1, 1, 1, 0, 0}, 2, 4), // sequence 1 is padded
	}
	p := nn.Eval(context.Background())
	out := m.Forward(p, in) // out.LMLogits [B, T, Vp/tp], out.BinaryLogits [B, 2]
	lmLabels := tensor.FromSlice(dev, []int32{-100, 8, -100, -100, -100, 12, -100, -100}, 2, 4)
	total, lm, binary := m.Loss(p, out, lmLabels, tensor.FromSlice(dev, []int32{0, 1}, 2))
	total.Backward()
	// Near-uniform predictions at initialization: about ln V and ln 2.
	fmt.Printf("MLM loss %.1f (ln V %.1f), binary loss %.1f (ln 2 %.1f)\n", lm.Item(), math.Log(50), binary.Item(), math.Log(2))
	// Output:
	// parameters: 8212
	// MLM loss 3.9 (ln V 3.9), binary loss 0.7 (ln 2 0.7)
}
