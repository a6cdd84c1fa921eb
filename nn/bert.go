package nn

import (
	"fmt"

	"megago/tensor"
)

// BERTConfig configures a BERT: Hugging Face's BertForPreTraining with NewBERTConfig's
// settings (post-LN, erf GeLU, biases, LayerNorm eps 1e-12), or Megatron's pre-LN variant
// with PostLN false (no embedding LayerNorm; a final LayerNorm after the last layer).
type BERTConfig struct {
	TransformerConfig
	// TypeVocab is the number of token types (segments A/B); 0 means 2.
	TypeVocab int
	// VocabMultiple pads the vocabulary as GPTConfig.VocabMultiple does (0 means 128).
	VocabMultiple int
	// NoBinaryHead leaves out the pooler and the binary (next-sentence or sentence-order)
	// head, as Megatron's --bert-no-binary-head; the model is then Hugging Face's
	// BertForMaskedLM.
	NoBinaryHead bool
}

// NewBERTConfig returns the configuration of Hugging Face's BertForPreTraining with the
// given sizes: learned positions, two token types, post-LN with LayerNorm eps 1e-12, erf
// GeLU, biases everywhere, an MLP of 4·hidden, dropout 0.1.
func NewBERTConfig(layers, hidden, heads, vocab, maxPosition int) BERTConfig {
	return BERTConfig{TransformerConfig: TransformerConfig{
		NumLayers: layers, Hidden: hidden, Heads: heads, Vocab: vocab, MaxPosition: maxPosition,
		Norm: LayerNormKind, Activation: GeLUErf, Position: LearnedPositions, PostLN: true, Bias: true,
		NormEps: 1e-12, Dropout: 0.1, AttnDropout: 0.1,
	}, TypeVocab: 2}
}

// BERT is a bidirectional encoder with BERT's pre-training heads, or one pipeline stage of
// it. The first stage embeds tokens; the last holds the pooler, the masked-language-model
// head (its output projection tied to the word embedding) and the binary head.
type BERT struct {
	Word      *VocabParallelEmbedding // [Vp/tp, C]; first stage
	Position  *Embedding              // [P, C]; first stage
	TokenType *Embedding              // [TypeVocab, C]; first stage
	EmbedNorm *LayerNorm              // [C]; first stage, post-LN only
	Block     *Block
	FinalNorm *LayerNorm // [C]; last stage, pre-LN only

	Pooler     *Linear               // [C, C]; last stage, with the binary head
	LMDense    *Linear               // [C, C]; last stage
	LMNorm     *LayerNorm            // [C]; last stage
	LMOutput   *ColumnParallelLinear // weight [Vp/tp, C] (Word's), bias [Vp/tp]; last stage
	BinaryHead *Linear               // [2, C]; last stage, with the binary head

	Config BERTConfig
	Stage  Stage
	Vp     int // padded vocabulary
	region tpRegion

	// Chosen by NewBERT from the stage and the configuration: first maps the stage's
	// input to the first layer's input ((*BERT).embedInput on the first stage, else
	// hiddenInput); last maps the last layer's output to the stage's output
	// ((*BERT).heads on the last stage, else hiddenOutput).
	first                func(m *BERT, p *Pass, in BERTInput) *tensor.Tensor
	last                 func(m *BERT, p *Pass, x *tensor.Tensor, in BERTInput) BERTOutput
	embedNorm, finalNorm func(x *tensor.Tensor) *tensor.Tensor                     // the norm or the identity (post- or pre-LN)
	lmActivation         func(x *tensor.Tensor) *tensor.Tensor                     // the MLM head's activation
	binary               func(m *BERT, p *Pass, x *tensor.Tensor, out *BERTOutput) // (*BERT).binaryHead, or noBinaryHead
}

// NewBERT builds the part of a BERT that stage holds (the zero Stage: the whole model).
// Parameter names: embedding.word.weight, embedding.position.weight,
// embedding.token_type.weight, embedding.norm.weight/.bias (post-LN), layers.<i>.…,
// final_norm.weight/.bias (pre-LN), pooler.weight/.bias, lm_head.dense.weight/.bias,
// lm_head.norm.weight/.bias, lm_head.bias [Vp] (split over TP like the vocabulary),
// binary_head.weight/.bias. On a last stage without the first, the MLM output holds a
// copy of the word embedding marked Shared, initialized identically (the embedding group
// keeps the two in sync). It returns the configuration's validation error.
func NewBERT(b *Builder, cfg BERTConfig, stage Stage) (*BERT, error) {
	cfg.TransformerConfig = cfg.TransformerConfig.Defaults()
	cfg.TP = b.TP.Size()
	if cfg.TypeVocab == 0 {
		cfg.TypeVocab = 2
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if stage == (Stage{}) {
		stage = WholeModel(cfg.NumLayers)
	}
	if stage.FirstLayer < 0 || stage.NumLayers < 0 || stage.FirstLayer+stage.NumLayers > cfg.NumLayers {
		return nil, fmt.Errorf("nn: BERT stage layers [%d, %d) outside [0, %d)", stage.FirstLayer, stage.FirstLayer+stage.NumLayers, cfg.NumLayers)
	}
	m := &BERT{Config: cfg, Stage: stage, Vp: PaddedVocab(cfg.Vocab, cfg.VocabMultiple, b.TP.Size()), region: b.region(),
		first: hiddenInput, last: hiddenOutput}
	c := cfg.TransformerConfig
	init := Normal(c.InitStd)
	if stage.PreProcess {
		m.first = (*BERT).embedInput
		m.Word = NewVocabParallelEmbedding(b, "embedding.word", m.Vp, c.Hidden, init)
		m.Position = NewEmbedding(b, "embedding.position", c.MaxPosition, c.Hidden, init)
		m.TokenType = NewEmbedding(b, "embedding.token_type", cfg.TypeVocab, c.Hidden, init)
		if c.PostLN {
			m.EmbedNorm = NewNorm(b, "embedding.norm", c.Norm, c.Hidden, c.NormEps)
		}
	}
	m.embedNorm = optionalNorm(m.EmbedNorm)
	m.Block = NewBlock(b, "layers", c, stage.FirstLayer, stage.NumLayers, false)
	if stage.PostProcess {
		m.last = (*BERT).heads
		m.newHeads(b, init)
	}
	return m, nil
}

// validate checks cfg (after Defaults) for what BERT needs besides TransformerConfig.
func (cfg BERTConfig) validate() error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	switch {
	case cfg.Position != LearnedPositions:
		return fmt.Errorf("nn: BERT needs learned positions (Position = %d)", cfg.Position)
	case cfg.Activation == SwiGLU:
		return fmt.Errorf("nn: BERT does not support the SwiGLU activation")
	case cfg.TypeVocab < 1:
		return fmt.Errorf("nn: BERT: TypeVocab = %d must be ≥ 1", cfg.TypeVocab)
	}
	return nil
}

// newHeads creates the last stage's final norm (pre-LN), pooler, MLM head and binary head.
func (m *BERT) newHeads(b *Builder, init Init) {
	c := m.Config.TransformerConfig
	if !c.PostLN {
		m.FinalNorm = NewNorm(b, "final_norm", c.Norm, c.Hidden, c.NormEps)
	}
	// The pooler and the binary head see the first token, whole on every rank.
	whole := *b
	whole.SequenceParallel = false
	if !m.Config.NoBinaryHead {
		m.Pooler = NewLinear(&whole, "pooler", c.Hidden, c.Hidden, LinearOptions{Bias: true, Init: init})
	}
	m.LMDense = NewLinear(b, "lm_head.dense", c.Hidden, c.Hidden, LinearOptions{Bias: true, Init: init})
	m.LMNorm = NewNorm(b, "lm_head.norm", c.Norm, c.Hidden, c.NormEps)
	var word *Param // [Vp/tp, C]
	if m.Word != nil {
		word = m.Word.Weight
	} else {
		word = newParam(b, "embedding.word.weight", tensor.Shape{m.Vp, c.Hidden}, 0, init)
		word.Shared = true
	}
	bias := newParam(b, "lm_head.bias", tensor.Shape{m.Vp}, 0, Constant(0))
	m.LMOutput = columnParallelOf(b, word, bias, LinearOptions{})
	m.binary = noBinaryHead
	if !m.Config.NoBinaryHead {
		m.BinaryHead = NewLinear(&whole, "binary_head", c.Hidden, 2, LinearOptions{Bias: true, Init: init})
		m.binary = (*BERT).binaryHead
	}
	m.finalNorm = optionalNorm(m.FinalNorm)
	m.lmActivation = plainActivation(c.Activation)
}

// Params returns the stage's parameters, each once (the tied MLM output weight on the
// first stage adds only its bias).
func (m *BERT) Params() []*Param {
	var ps []*Param
	if m.Word != nil {
		ps = append(ps, m.Word.Params()...)
		ps = append(ps, m.Position.Params()...)
		ps = append(ps, m.TokenType.Params()...)
	}
	if m.EmbedNorm != nil {
		ps = append(ps, m.EmbedNorm.Params()...)
	}
	ps = append(ps, m.Block.Params()...)
	if m.FinalNorm != nil {
		ps = append(ps, m.FinalNorm.Params()...)
	}
	if m.LMOutput != nil {
		ps = append(ps, m.Pooler.Params()...)
		ps = append(ps, m.LMDense.Params()...)
		ps = append(ps, m.LMNorm.Params()...)
		if m.Word == nil {
			ps = append(ps, m.LMOutput.Weight)
		}
		ps = append(ps, m.LMOutput.Bias)
		ps = append(ps, m.BinaryHead.Params()...)
	}
	return ps
}

// BERTInput is a BERT stage's input.
type BERTInput struct {
	IDs        *tensor.Tensor // [B, T] token ids; first stage
	TokenTypes *tensor.Tensor // [B, T] segment ids in [0, TypeVocab); first stage; nil means all 0
	// Attend is Hugging Face's attention_mask [B, T]: 1 where a key may be attended to, 0
	// at padding. Every stage needs it; nil means no padding.
	Attend *tensor.Tensor
	// Hidden is the previous stage's output [B, T, C] ([B, T/tp, C] under sequence
	// parallelism); stages after the first.
	Hidden *tensor.Tensor
	// LMPositions [N], if not nil, are the positions whose MLM scores the last stage
	// computes, as indices b·T + t into the flattened batch (the masked tokens, as
	// fairseq's masked_tokens): the other positions skip the vocabulary projection, which
	// dominates a small BERT's cost. LMLogits are then [N, Vp/tp] and Loss takes labels [N].
	LMPositions *tensor.Tensor
}

// BERTOutput is what a BERT stage returns.
type BERTOutput struct {
	// Hidden is the stage's output hidden states [B, T, C] ([B, T/tp, C] under sequence
	// parallelism): the next stage's input, or on the last stage the encoder's output.
	Hidden *tensor.Tensor
	// LMLogits are the masked-language-model scores [B, T, Vp/tp] ([N, Vp/tp] with
	// LMPositions), this rank's slice of the padded vocabulary; last stage.
	LMLogits *tensor.Tensor
	// Pooled is tanh(pooler(first token)) [B, C] and BinaryLogits the binary head's scores
	// [B, 2]; last stage with the binary head.
	Pooled, BinaryLogits *tensor.Tensor
}

// Embed maps token ids and token types [B, T] to the first layer's input [B, T, C]
// ([B, T/tp, C] under sequence parallelism): word + position + token-type embeddings,
// then (post-LN) LayerNorm, then dropout. It panics if T exceeds MaxPosition.
func (m *BERT) Embed(p *Pass, ids, types *tensor.Tensor) *tensor.Tensor {
	c := m.Config.TransformerConfig
	t := ids.Dim(1)
	if t > c.MaxPosition {
		panic(fmt.Sprintf("nn: BERT: sequence length %d exceeds MaxPosition %d", t, c.MaxPosition))
	}
	dev := ids.Device()
	beforeForward(m.Word, m.Position, m.TokenType)
	if m.EmbedNorm != nil {
		beforeForward(m.EmbedNorm)
	}
	x := m.Word.Forward(p, ids) // [B, T, C]
	pos := tensor.Arange(dev, tensor.I64, 0, 1, t)
	x = tensor.Add(x, m.Position.Forward(pos).Reshape(1, t, c.Hidden)) // [B, T, C]
	if types == nil {
		types = tensor.Zeros(dev, tensor.I64, ids.Shape()...)
	}
	x = tensor.Add(x, m.TokenType.Forward(types)) // [B, T, C]
	x = m.region.fromEmbedding(p, x)              // [B, T/tp, C] under sequence parallelism
	x = m.embedNorm(x)
	return m.region.dropout(p, x, c.Dropout, "embedding.dropout")
}

// Forward runs the stage: the embedding on the first stage, its layers (bidirectional
// attention, padded keys masked), and on the last stage the heads. Under sequence
// parallelism T must be divisible by tp (the SP mappings panic otherwise).
func (m *BERT) Forward(p *Pass, in BERTInput) BERTOutput {
	var mask AttentionMask
	if in.Attend != nil {
		mask.Masked = PaddingMask(in.Attend) // [B, 1, 1, T]
	}
	x := m.first(m, p, in)
	x = m.Block.Forward(p, x, LayerInput{Self: mask}, nil) // [B, T, C]
	return m.last(m, p, x, in)
}

// embedInput is the first stage's input: the embedding of in.IDs and in.TokenTypes.
func (m *BERT) embedInput(p *Pass, in BERTInput) *tensor.Tensor {
	return m.Embed(p, in.IDs, in.TokenTypes)
}

// hiddenInput is a later stage's input, the previous stage's hidden states.
func hiddenInput(_ *BERT, _ *Pass, in BERTInput) *tensor.Tensor { return in.Hidden }

// hiddenOutput is the output of a stage without the heads: its hidden states.
func hiddenOutput(_ *BERT, _ *Pass, x *tensor.Tensor, _ BERTInput) BERTOutput {
	return BERTOutput{Hidden: x}
}

// heads is the last stage's output: the final norm (pre-LN), the MLM scores (of
// in.LMPositions only, if set) and the binary head's.
func (m *BERT) heads(p *Pass, x *tensor.Tensor, in BERTInput) BERTOutput {
	if m.FinalNorm != nil {
		beforeForward(m.FinalNorm)
	}
	beforeForward(m.LMDense, m.LMNorm, m.LMOutput)
	x = m.finalNorm(x)
	out := BERTOutput{Hidden: x}
	h := m.lmActivation(m.LMDense.Forward(x)) // [B, T, C]
	h = m.LMNorm.Forward(h)
	if in.LMPositions != nil {
		out.LMLogits = m.lmScoresAt(p, h, in.LMPositions) // [N, Vp/tp]
	} else {
		out.LMLogits = m.LMOutput.Forward(p, h) // [B, T, Vp/tp]
	}
	m.binary(m, p, x, &out)
	return out
}

// binaryHead sets out.Pooled and out.BinaryLogits from the last layer's output x.
func (m *BERT) binaryHead(p *Pass, x *tensor.Tensor, out *BERTOutput) {
	beforeForward(m.Pooler, m.BinaryHead)
	out.Pooled = tensor.Tanh(m.Pooler.Forward(m.region.firstPosition(p, x))) // [B, C]
	out.BinaryLogits = m.BinaryHead.Forward(out.Pooled)                      // [B, 2]
}

// noBinaryHead is binaryHead for a model without one (NoBinaryHead).
func noBinaryHead(*BERT, *Pass, *tensor.Tensor, *BERTOutput) {}

// lmScoresAt returns the MLM scores [N, Vp/tp] of positions [N] (indices into the
// flattened batch) of h [B, T, C] ([B, T/tp, C] under sequence parallelism). The rows are
// chosen after the input mapping of the output layer — GatherFromSP under sequence
// parallelism (backward: reduce-scatter), else CopyToTP (backward: all-reduce) — so each
// rank's partial gradient of the chosen rows is summed as the full projection's would be.
func (m *BERT) lmScoresAt(p *Pass, h, positions *tensor.Tensor) *tensor.Tensor {
	h = m.region.toColumn(p, h)                                                 // [B, T, C]
	rows := tensor.Embedding(h.Reshape(h.Dim(0)*h.Dim(1), h.Dim(2)), positions) // [N, C]
	y := tensor.MatMulT(rows, m.LMOutput.Weight.Tensor, false, true)            // [N, Vp/tp]
	return tensor.Add(y, m.LMOutput.Bias.Tensor)
}

// Loss returns BERT's pre-training loss, total = lm + binary, with lm the mean cross
// entropy of out.LMLogits against lmLabels [B, T] ([N] with LMPositions) over the labels
// that are not -100 (the true vocabulary only), and binary the mean cross entropy of
// out.BinaryLogits against binaryLabels [B] (nil, and not added, without the binary head
// or labels).
func (m *BERT) Loss(p *Pass, out BERTOutput, lmLabels, binaryLabels *tensor.Tensor) (total, lm, binary *tensor.Tensor) {
	perToken := VocabParallelCrossEntropy(p, m.region.tp, out.LMLogits, lmLabels,
		CrossEntropyOptions{Vocab: m.Config.Vocab, Ignore: true, IgnoreIndex: -100}) // [B, T]
	lm = MeanLoss(perToken, LabelMask(lmLabels, -100, perToken.DType()))
	if out.BinaryLogits == nil || binaryLabels == nil {
		return lm, lm, nil
	}
	binary = tensor.CrossEntropy(out.BinaryLogits, binaryLabels, tensor.CrossEntropyOptions{Ignore: true, IgnoreIndex: -100})
	return tensor.Add(lm, binary), lm, binary
}
