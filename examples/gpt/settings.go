package main

import (
	"cmp"

	"megago/nn"
)

// What the GPT's settings derive beyond package settings: the model and its FLOPs per
// iteration.

// modelConfig returns the GPT the flags describe, for a vocabulary of vocab ids.
func (c *config) modelConfig(vocab int) nn.GPTConfig {
	if vocab == 0 {
		vocab = c.MakeVocabSizeDivisibleBy * c.TP // a placeholder for the checks
	}
	m := nn.GPTConfig{TransformerConfig: nn.TransformerConfig{
		NumLayers: c.NumLayers, Hidden: c.HiddenSize, Heads: c.NumAttentionHeads, FFNHidden: c.FFNHiddenSize,
		Vocab: vocab, MaxPosition: c.MaxPositionEmbeddings, InitStd: c.InitMethodStd,
		Dropout: c.HiddenDropout, AttnDropout: c.AttentionDropout,
	}, Untied: c.UntieEmbeddings, VocabMultiple: c.MakeVocabSizeDivisibleBy}
	c.Arch.Apply(&m.TransformerConfig) // GPT-2 with the flags' defaults: LayerNorm, GeLU, learned positions, biases
	c.MoE.Apply(&m.TransformerConfig)  // dense without --num-experts
	c.CP.Apply(&m.TransformerConfig)   // one rank without --context-parallel-size
	return m
}

// denseFFN returns the dense MLP's hidden size: --ffn-hidden-size, else 4 × hidden.
func (c *config) denseFFN() int { return cmp.Or(c.FFNHiddenSize, 4*c.HiddenSize) }

// flopsPerIteration returns the model FLOPs of one iteration: settings.FLOPs, counted
// by nn.TrainingFLOPs over the whole model configuration (its experts too, where nn
// counts them).
func (c *config) flopsPerIteration(m nn.GPTConfig) float64 {
	return nn.TrainingFLOPs(m.TransformerConfig, nn.PaddedVocab(m.Vocab, m.VocabMultiple, c.TP), c.GlobalBatchSize, c.SeqLength)
}
