package nn

// Model FLOPs: the count behind every GFLOP/s, TFLOP/s and MFU figure megago prints
// (megago bench, the examples' progress lines), as the project's BENCHMARKS.md defines it.

// MatMulWeights returns N, the weights of a GPT- or BERT-style transformer that take part
// in matrix multiplies: N = L·(4C² + 2C·F) + Vp·C, which is 12·L·C² + Vp·C when F = 4C.
// Per layer 4C² are attention's query, key, value and output projections and 2C·F the
// MLP's two; Vp·C is the output layer over the padded vocabulary of vp ids (0 for a model
// without one, such as a classifier). L, C and F are c's NumLayers, Hidden and FFNHidden
// (4·Hidden when 0); other fields (heads, GQA, biases, norms, embeddings looked up rather
// than multiplied) do not enter the count.
//
// A mixture-of-experts layer (c.MoE) counts the weights a token is multiplied by: the
// router's E·C, TopK experts' 2C·F of the MoE's expert hidden size and the shared
// expert's 2C·F, instead of the dense MLP's 2C·F: active parameters, as BENCHMARKS.md's
// W4 counts them.
func MatMulWeights(c TransformerConfig, vp int) int {
	c = c.Defaults()
	n := vp * c.Hidden
	for i := range c.NumLayers {
		n += 4*c.Hidden*c.Hidden + moeOrDenseWeights(c, i)
	}
	return n
}

// moeOrDenseWeights returns the feed-forward weights layer i of c multiplies a token
// by (c with defaults).
func moeOrDenseWeights(c TransformerConfig, i int) int {
	m := c.MoE
	if !m.IsMoELayer(i, c.NumLayers) {
		return 2 * c.Hidden * c.FFNHidden
	}
	return m.NumExperts*c.Hidden + m.topK()*2*c.Hidden*moeFFNHidden(c) + 2*c.Hidden*m.SharedExpertFFNHidden
}

// TrainingFLOPs returns the model FLOPs of one training step (forward and backward) of
// the transformer of MatMulWeights over batch sequences of seq tokens:
//
//	tokens × (6·N + 12·L·T·C)
//
// with tokens = batch·seq, N = MatMulWeights(c, vp), T = seq, and attention counted over
// the full T×T square (causal masking not subtracted). 6·N is a multiply-add (2 FLOPs)
// per weight and token in the forward pass and twice that in the backward; 12·L·T·C is
// the same for attention's scores and weighted sum (2·T·C multiply-adds per token and
// layer). Activation recomputation is not counted: these are model FLOPs, not hardware
// FLOPs. BENCHMARKS.md's check values: 191.61 GFLOP per step for W1 (GPT-2 124M, L=12,
// C=768, Vp=50304, 4 × 64 tokens) and 70.87 GFLOP for W2 (L=4, C=256, Vp=8192, 8 × 256).
func TrainingFLOPs(c TransformerConfig, vp, batch, seq int) float64 {
	l, t, ch := float64(c.NumLayers), float64(seq), float64(c.Hidden)
	tokens := float64(batch) * t
	return tokens * (6*float64(MatMulWeights(c, vp)) + 12*l*t*ch)
}
