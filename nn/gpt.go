package nn

import (
	"fmt"

	"megago/parallel"
	"megago/tensor"
)

// Stage says which part of a model a pipeline stage holds: the embedding (PreProcess),
// layers [FirstLayer, FirstLayer+NumLayers), and the final norm and output head
// (PostProcess). The zero Stage is filled in by WholeModel.
type Stage struct {
	PreProcess, PostProcess bool
	FirstLayer, NumLayers   int
}

// WholeModel returns the stage holding a whole model of numLayers layers.
func WholeModel(numLayers int) Stage {
	return Stage{PreProcess: true, PostProcess: true, NumLayers: numLayers}
}

// GPTConfig configures a GPT: GPT-2 with the defaults (learned positions, LayerNorm,
// GeLU, biases, tied embeddings), or Llama-style with RoPE, RMSNorm, SwiGLU, grouped-query
// attention and no biases (see LlamaConfig).
type GPTConfig struct {
	TransformerConfig
	// Untied gives the output layer its own weight instead of the word embedding's.
	Untied bool
	// VocabMultiple pads the vocabulary to a multiple of VocabMultiple·tp (Megatron's
	// --make-vocab-size-divisible-by; 0 means 128, 1 pads only for TP divisibility).
	VocabMultiple int
}

// LlamaConfig returns a Llama-style GPTConfig: RoPE, RMSNorm (eps 1e-6), SwiGLU, no
// biases, untied output layer.
func LlamaConfig(layers, hidden, heads, kvHeads, ffn, vocab int) GPTConfig {
	return GPTConfig{TransformerConfig: TransformerConfig{
		NumLayers: layers, Hidden: hidden, Heads: heads, KVHeads: kvHeads, FFNHidden: ffn, Vocab: vocab,
		Norm: RMSNormKind, Activation: SwiGLU, Position: RoPE, NormEps: 1e-6,
	}, Untied: true}
}

// GPT is a decoder-only language model, or one pipeline stage of it.
type GPT struct {
	Word      *VocabParallelEmbedding // [Vp/tp, C]; first stage
	Position  *Embedding              // [P, C]; first stage, learned positions only
	Block     *Block
	FinalNorm *LayerNorm            // last stage
	Output    *ColumnParallelLinear // [Vp/tp, C]; last stage; shares Word's weight when tied

	Config GPTConfig
	Stage  Stage
	Vp     int // padded vocabulary
	region tpRegion
	cp     parallel.Comm // context-parallel group (Builder.CP; one rank without)
	// first maps the stage's input to the first layer's input (embedIDs on the first
	// stage, else hiddenIn); last maps the last layer's output to the stage's output
	// (logits on the last stage, else hiddenOut).
	first func(m *GPT, p *Pass, input *tensor.Tensor, d Documents, caches []*KVCache) *tensor.Tensor
	last  func(m *GPT, p *Pass, x *tensor.Tensor) *tensor.Tensor
	// positions adds learned position embeddings to the word embeddings
	// ((*GPT).addPositions), or nothing (noPositions: RoPE rotates in attention).
	positions func(m *GPT, x *tensor.Tensor, pastLen int, ids *tensor.Tensor) *tensor.Tensor
}

// NewGPT builds the part of a GPT that stage holds. Parameter names: embedding.word.weight,
// embedding.position.weight, layers.<i>.…, final_norm.weight/.bias, output.weight (untied).
// On a last stage without the first, a tied output layer holds a copy of the word
// embedding marked Shared, initialized identically (the embedding group keeps the two in
// sync). It returns the configuration's validation error.
func NewGPT(b *Builder, cfg GPTConfig, stage Stage) (*GPT, error) {
	cfg.TransformerConfig = cfg.TransformerConfig.Defaults()
	cfg.TP = b.TP.Size()
	cp := b.CP
	if cp == nil {
		cp = parallel.Self()
	}
	cfg.CP = cp.Size()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if stage == (Stage{}) {
		stage = WholeModel(cfg.NumLayers)
	}
	if stage.FirstLayer < 0 || stage.NumLayers < 0 || stage.FirstLayer+stage.NumLayers > cfg.NumLayers {
		return nil, fmt.Errorf("nn: GPT stage layers [%d, %d) outside [0, %d)", stage.FirstLayer, stage.FirstLayer+stage.NumLayers, cfg.NumLayers)
	}
	m := &GPT{Config: cfg, Stage: stage, Vp: PaddedVocab(cfg.Vocab, cfg.VocabMultiple, b.TP.Size()), region: b.region(), cp: cp,
		first: hiddenIn, last: hiddenOut, positions: noPositions}
	init := Normal(cfg.InitStd)
	if stage.PreProcess {
		m.first = (*GPT).embedIDs
		m.Word = NewVocabParallelEmbedding(b, "embedding.word", m.Vp, cfg.Hidden, init)
		if cfg.Position == LearnedPositions {
			m.Position = NewEmbedding(b, "embedding.position", cfg.MaxPosition, cfg.Hidden, init)
			m.positions = (*GPT).addPositions
		}
	}
	m.Block = NewBlock(b, "layers", cfg.TransformerConfig, stage.FirstLayer, stage.NumLayers, false)
	if stage.PostProcess {
		m.last = (*GPT).logits
		m.FinalNorm = NewNorm(b, "final_norm", cfg.Norm, cfg.Hidden, cfg.NormEps)
		switch {
		case cfg.Untied:
			m.Output = NewColumnParallelLinear(b, "output", cfg.Hidden, m.Vp, LinearOptions{Init: init})
		case m.Word != nil:
			m.Output = columnParallelOf(b, m.Word.Weight, nil, LinearOptions{})
		default:
			m.Output = NewColumnParallelLinear(b, "embedding.word", cfg.Hidden, m.Vp, LinearOptions{Init: init})
			m.Output.Weight.Shared = true
		}
	}
	return m, nil
}

// Params returns the stage's parameters, each once (a tied output layer on the first
// stage adds nothing).
func (m *GPT) Params() []*Param {
	var ps []*Param
	if m.Word != nil {
		ps = append(ps, m.Word.Params()...)
	}
	if m.Position != nil {
		ps = append(ps, m.Position.Params()...)
	}
	ps = append(ps, m.Block.Params()...)
	if m.FinalNorm != nil {
		ps = append(ps, m.FinalNorm.Params()...)
	}
	if m.Output != nil && (m.Word == nil || m.Output.Weight != m.Word.Weight) {
		ps = append(ps, m.Output.Params()...)
	}
	return ps
}

// Embed maps token ids [B, T] to the first layer's input [B, T, C] ([B, T/tp, C] under
// sequence parallelism). pastLen is the number of positions already in a KV cache.
// Under context parallelism (Builder.CP of size cp > 1) ids are the rank's positions
// CPPositions(T, cp, rank) of the sequences, [B, T/cp] (see CPSlice), and the first
// layer's input is [B, T/cp, C] ([B, T/(cp·tp), C] under sequence parallelism).
func (m *GPT) Embed(p *Pass, ids *tensor.Tensor, pastLen int) *tensor.Tensor {
	return m.embed(p, ids, pastLen, nil)
}

// embed is Embed with each token's position given by positions [B, T] when not nil.
func (m *GPT) embed(p *Pass, ids *tensor.Tensor, pastLen int, positions *tensor.Tensor) *tensor.Tensor {
	if cp := m.cp.Size(); cp > 1 && (ids.Rank() != 2 || ids.Dim(1)%2 != 0 || pastLen != 0) {
		panic(fmt.Sprintf("nn: GPT: token ids %v at context-parallel size %d (past %d): want [B, T/cp] with the sequence T a multiple of 2·cp = %d, and no KV cache",
			ids.Shape(), cp, pastLen, 2*cp))
	}
	beforeForward(m.Word)
	x := m.Word.Forward(p, ids)               // [B, T, C]
	x = m.positions(m, x, pastLen, positions) // [B, T, C]
	x = m.region.fromEmbedding(p, x)          // [B, T/tp, C] under sequence parallelism
	return m.region.dropout(p, x, m.Config.Dropout, "embedding.dropout")
}

// addPositions adds the learned embeddings of positions [pastLen, pastLen+T) to x
// [B, T, C] (under context parallelism the rank's CPPositions of the sequence of T·cp),
// or those of ids [B, T] when not nil. It panics if they exceed MaxPosition.
func (m *GPT) addPositions(x *tensor.Tensor, pastLen int, ids *tensor.Tensor) *tensor.Tensor {
	if ids != nil {
		return m.addPositionIDs(x, ids)
	}
	t, cp := x.Dim(1), m.cp.Size()
	if pastLen+t*cp > m.Config.MaxPosition {
		panic(fmt.Sprintf("nn: GPT: positions up to %d exceed MaxPosition %d", pastLen+t*cp, m.Config.MaxPosition))
	}
	pos := tensor.Arange(x.Device(), tensor.I64, float64(pastLen), 1, t)
	if cp > 1 {
		ps := CPPositions(t*cp, cp, m.cp.Rank())
		idx := make([]int64, t)
		for i, v := range ps {
			idx[i] = int64(v)
		}
		pos = tensor.FromSlice(x.Device(), idx, t)
	}
	beforeForward(m.Position)
	return tensor.Add(x, m.Position.Forward(pos).Reshape(1, t, m.Config.Hidden)) // [B, T, C]
}

// noPositions is addPositions without learned positions.
func noPositions(_ *GPT, x *tensor.Tensor, _ int, _ *tensor.Tensor) *tensor.Tensor { return x }

// Forward runs the stage. The first stage takes token ids [B, T]; later stages take the
// previous stage's hidden states. The last stage returns logits [B, T, Vp/tp] (this rank's
// slice of the padded vocabulary); other stages return hidden states. caches, if not nil,
// holds one KV cache per layer of the stage (generation).
func (m *GPT) Forward(p *Pass, input *tensor.Tensor, caches []*KVCache) *tensor.Tensor {
	return m.forward(p, input, Documents{}, caches)
}

// forward is Forward for the documents d (ForwardDocuments; the zero Documents for
// Forward).
func (m *GPT) forward(p *Pass, input *tensor.Tensor, d Documents, caches []*KVCache) *tensor.Tensor {
	return m.last(m, p, m.hidden(p, input, d, caches))
}

// hidden is forward up to the last layer's output, without the stage's last map (last).
func (m *GPT) hidden(p *Pass, input *tensor.Tensor, d Documents, caches []*KVCache) *tensor.Tensor {
	x := m.first(m, p, input, d, caches)
	return m.Block.Forward(p, x, LayerInput{Self: d.mask()}, caches)
}

// embedIDs is the first stage's input: the embedding of ids [B, T] at d's positions, or
// following the caches' past positions.
func (m *GPT) embedIDs(p *Pass, ids *tensor.Tensor, d Documents, caches []*KVCache) *tensor.Tensor {
	past := 0
	if len(caches) > 0 {
		past = caches[0].Len()
	}
	return m.embed(p, ids, past, d.Positions)
}

// logits is the last stage's output: the final norm and the output layer, [B, T, Vp/tp].
func (m *GPT) logits(p *Pass, x *tensor.Tensor) *tensor.Tensor {
	beforeForward(m.FinalNorm, m.Output)
	return m.Output.Forward(p, m.FinalNorm.Forward(x))
}

// hiddenIn and hiddenOut pass hidden states through a stage that does not embed or
// does not hold the heads.
func hiddenIn(_ *GPT, _ *Pass, x *tensor.Tensor, _ Documents, _ []*KVCache) *tensor.Tensor { return x }
func hiddenOut(_ *GPT, _ *Pass, x *tensor.Tensor) *tensor.Tensor                           { return x }

// Loss returns the mean cross entropy of logits [B, T, Vp/tp] against labels [B, T],
// over the labels that are not -100 (Hugging Face's convention), and the per-token losses.
// Under context parallelism the mean is over the tokens of the whole sequences, every
// rank of the CP group returning the same value (cpMeanLoss).
func (m *GPT) Loss(p *Pass, logits, labels *tensor.Tensor) (mean, perToken *tensor.Tensor) {
	return m.loss(p, logits, labels, false)
}

// LossConsuming is Loss for a caller that does not read logits after backward (a
// training step): the backward writes the logits' gradient over them and releases them
// once used (CrossEntropyOptions.GradInPlace), saving a logits-sized buffer, [B, T, Vp/tp].
func (m *GPT) LossConsuming(p *Pass, logits, labels *tensor.Tensor) (mean, perToken *tensor.Tensor) {
	return m.loss(p, logits, labels, true)
}

func (m *GPT) loss(p *Pass, logits, labels *tensor.Tensor, inPlace bool) (mean, perToken *tensor.Tensor) {
	perToken = VocabParallelCrossEntropy(p, m.region.tp, logits, labels,
		CrossEntropyOptions{Vocab: m.Config.Vocab, Ignore: true, IgnoreIndex: -100, GradInPlace: inPlace})
	mask := LabelMask(labels, -100, perToken.DType())
	if m.cp.Size() > 1 {
		return cpMeanLoss(p, m.cp, perToken, mask), perToken
	}
	return MeanLoss(perToken, mask), perToken
}

// LabelMask returns 1 where labels ≠ ignore and 0 elsewhere, as a tensor of dtype dt.
func LabelMask(labels *tensor.Tensor, ignore int64, dt tensor.DType) *tensor.Tensor {
	l := tensor.ToSlice[int64](labels)
	m := make([]float64, len(l))
	for i, v := range l {
		if v != ignore {
			m[i] = 1
		}
	}
	return tensor.FromSlice(labels.Device(), m, labels.Shape()...).Cast(dt)
}
