package nn

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"strings"

	"megago/tensor"
)

// T5Config configures a T5 encoder-decoder, Hugging Face's T5ForConditionalGeneration
// with T5 v1.0 settings (see NewT5Config). NumLayers is the encoder's depth and HeadSize
// Hugging Face's d_kv.
type T5Config struct {
	TransformerConfig
	// DecoderLayers is the decoder's depth; 0 means NumLayers.
	DecoderLayers int
	// VocabMultiple pads the vocabulary as GPTConfig.VocabMultiple does (0 means 128).
	VocabMultiple int
	// EmbeddingInitStd is the std of the shared word embedding's initialization; 0 means
	// InitStd (Megatron's choice). Hugging Face's T5 draws it with std 1, which suits the
	// output projection's C^-0.5 scaling: initial logits of order 1.
	EmbeddingInitStd float64
}

// NewT5Config returns a T5 v1.0 configuration with the given sizes: pre-norm layers with
// RMSNorm (eps 1e-6) and no biases, attention without 1/√HS scaling plus a relative
// position bias (32 buckets, max distance 128), a ReLU MLP, the output tied to the shared
// embedding, dropout 0.1 (Hugging Face's dropout_rate, also on attention probabilities).
func NewT5Config(layers, hidden, heads, headSize, ffn, vocab int) T5Config {
	return T5Config{TransformerConfig: TransformerConfig{
		NumLayers: layers, Hidden: hidden, Heads: heads, HeadSize: headSize, FFNHidden: ffn, Vocab: vocab,
		Norm: RMSNormKind, Activation: ReLU, Position: RelativePositions, NormEps: 1e-6,
		NoAttentionScale: true, Dropout: 0.1, AttnDropout: 0.1,
	}}
}

// errT5Pipeline is returned by NewT5 for a pipeline stage.
var errT5Pipeline = errors.New("nn: T5 under pipeline parallelism is not supported; use TP and DP")

// T5 is an encoder-decoder transformer with T5 v1.0's architecture. One word embedding
// is shared by the encoder's and the decoder's inputs and, scaled by C^-0.5 on the
// decoder's output, by the output projection. Each stack has its own relative position
// bias, computed once and added in every layer's self-attention. It runs under TP (with
// or without sequence parallelism) and DP; it does not support pipeline parallelism.
type T5 struct {
	Word        *VocabParallelEmbedding // [Vp/tp, C]; shared
	EncoderBias *RelativePositionBias   // [NB, NH/tp]; bidirectional
	Encoder     *Block
	EncoderNorm *LayerNorm            // [C]
	DecoderBias *RelativePositionBias // [NB, NH/tp]; unidirectional
	Decoder     *Block                // layers with cross-attention
	DecoderNorm *LayerNorm            // [C]
	Output      *ColumnParallelLinear // weight [Vp/tp, C], Word's

	Config T5Config
	Vp     int // padded vocabulary
	region tpRegion
}

// NewT5 builds a T5. stage must be the whole model: the zero Stage, or one with
// PreProcess, PostProcess, FirstLayer 0 and NumLayers the encoder's or the encoder's plus
// the decoder's depth; any other stage is an error (T5 under pipeline parallelism is not
// supported). Parameter names: embedding.word.weight, encoder.relative_bias.weight,
// encoder.layers.<i>.…, encoder.final_norm.weight, decoder.relative_bias.weight,
// decoder.layers.<i>.… (with norm_cross and cross.{q,kv,proj}), decoder.final_norm.weight.
// It returns the configuration's validation error, or an error if the configuration is
// not T5 v1.0's (see NewT5Config).
func NewT5(b *Builder, cfg T5Config, stage Stage) (*T5, error) {
	cfg.TransformerConfig = cfg.TransformerConfig.Defaults()
	cfg.TP = b.TP.Size()
	if cfg.DecoderLayers == 0 {
		cfg.DecoderLayers = cfg.NumLayers
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	whole := stage == (Stage{}) || (stage.PreProcess && stage.PostProcess && stage.FirstLayer == 0 &&
		(stage.NumLayers == cfg.NumLayers || stage.NumLayers == cfg.NumLayers+cfg.DecoderLayers))
	if !whole {
		return nil, fmt.Errorf("%w (stage %+v)", errT5Pipeline, stage)
	}
	c := cfg.TransformerConfig
	m := &T5{Config: cfg, Vp: PaddedVocab(c.Vocab, cfg.VocabMultiple, b.TP.Size()), region: b.region()}
	init := Normal(c.InitStd)
	m.Word = NewVocabParallelEmbedding(b, "embedding.word", m.Vp, c.Hidden, Normal(cmp.Or(cfg.EmbeddingInitStd, c.InitStd)))
	m.EncoderBias = NewRelativePositionBias(b, "encoder.relative_bias", c.RelativeBuckets, c.RelativeMaxDistance, c.Heads, true, init)
	m.Encoder = NewBlock(b, "encoder.layers", c, 0, c.NumLayers, false)
	m.EncoderNorm = NewNorm(b, "encoder.final_norm", c.Norm, c.Hidden, c.NormEps)
	dc := c
	dc.NumLayers = cfg.DecoderLayers
	m.DecoderBias = NewRelativePositionBias(b, "decoder.relative_bias", c.RelativeBuckets, c.RelativeMaxDistance, c.Heads, false, init)
	m.Decoder = NewBlock(b, "decoder.layers", dc, 0, dc.NumLayers, true)
	m.DecoderNorm = NewNorm(b, "decoder.final_norm", c.Norm, c.Hidden, c.NormEps)
	m.Output = columnParallelOf(b, m.Word.Weight, nil, LinearOptions{})
	for _, l := range append(append([]*TransformerLayer(nil), m.Encoder.Layers...), m.Decoder.Layers...) {
		l.MLP.Dropout = c.Dropout // T5's DenseReluDense drops out after the ReLU
	}
	return m, nil
}

// validate checks cfg (after Defaults) and that it is T5 v1.0's architecture.
func (cfg T5Config) validate() error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	var errs []string
	bad := func(format string, a ...any) { errs = append(errs, fmt.Sprintf(format, a...)) }
	if cfg.DecoderLayers < 1 {
		bad("DecoderLayers = %d must be ≥ 1", cfg.DecoderLayers)
	}
	if cfg.Norm != RMSNormKind || cfg.Activation != ReLU || cfg.Position != RelativePositions {
		bad("T5 v1.0 needs Norm RMSNormKind, Activation ReLU and Position RelativePositions")
	}
	if cfg.PostLN || cfg.Bias || !cfg.NoAttentionScale {
		bad("T5 v1.0 needs pre-norm layers (PostLN false), no biases and NoAttentionScale")
	}
	if !(cfg.EmbeddingInitStd >= 0) {
		bad("EmbeddingInitStd = %v must be ≥ 0", cfg.EmbeddingInitStd)
	}
	if cfg.KVHeads != cfg.Heads {
		bad("KVHeads = %d: T5 has no grouped-query attention", cfg.KVHeads)
	}
	if len(errs) > 0 {
		return errors.New("nn: invalid T5Config: " + strings.Join(errs, "; "))
	}
	return nil
}

// Params returns the model's parameters, each once (the output layer shares the word
// embedding).
func (m *T5) Params() []*Param {
	return collect(m.Word, m.EncoderBias, m.Encoder, m.EncoderNorm, m.DecoderBias, m.Decoder, m.DecoderNorm)
}

// T5Input is a T5 batch.
type T5Input struct {
	IDs *tensor.Tensor // [B, Te] encoder token ids
	// Attend is the encoder's attention_mask [B, Te] (1 = token, 0 = padding): padded keys
	// are masked in the encoder's self-attention and in the decoder's cross-attention. nil
	// means no padding.
	Attend     *tensor.Tensor
	DecoderIDs *tensor.Tensor // [B, Td] decoder input ids (T5ShiftRight of the labels)
	// DecoderAttend is the decoder's attention_mask [B, Td], applied with the causal mask;
	// nil means none.
	DecoderAttend *tensor.Tensor
}

// embed looks up ids [B, T] in the shared embedding and applies dropout (key site),
// returning [B, T, C] ([B, T/tp, C] under sequence parallelism).
func (m *T5) embed(p *Pass, ids *tensor.Tensor, site string) *tensor.Tensor {
	beforeForward(m.Word)
	x := m.Word.Forward(p, ids)      // [B, T, C]
	x = m.region.fromEmbedding(p, x) // [B, T/tp, C] under sequence parallelism
	return m.dropHidden(p, x, site)
}

// dropHidden applies hidden dropout at site to x [B, T, C] ([B, T/tp, C] under sequence
// parallelism).
func (m *T5) dropHidden(p *Pass, x *tensor.Tensor, site string) *tensor.Tensor {
	return m.region.dropout(p, x, m.Config.Dropout, site)
}

// Encode runs the encoder on ids [B, Te] with Hugging Face's attention_mask attend [B, Te]
// (nil: no padding) and returns its output [B, Te, C] ([B, Te/tp, C] under sequence
// parallelism), after the final norm and dropout.
func (m *T5) Encode(p *Pass, ids, attend *tensor.Tensor) *tensor.Tensor {
	te := ids.Dim(1)
	x := m.embed(p, ids, "encoder.embedding.dropout")
	beforeForward(m.EncoderBias)
	self := AttentionMask{Bias: m.EncoderBias.Forward(te, te, 0)} // [1, NH/tp, Te, Te]
	if attend != nil {
		self.Masked = PaddingMask(attend) // [B, 1, 1, Te]
	}
	x = m.Encoder.Forward(p, x, LayerInput{Self: self}, nil)
	beforeForward(m.EncoderNorm)
	return m.dropHidden(p, m.EncoderNorm.Forward(x), "encoder.final.dropout")
}

// Decode runs the decoder on ids [B, Td] (attend: its attention_mask or nil) attending to
// the encoder output memory with the encoder's attention_mask memoryAttend (nil: no
// padding), and returns the logits [B, Td, Vp/tp], this rank's slice of the padded
// vocabulary.
func (m *T5) Decode(p *Pass, ids, attend, memory, memoryAttend *tensor.Tensor) *tensor.Tensor {
	td := ids.Dim(1)
	x := m.embed(p, ids, "decoder.embedding.dropout")
	beforeForward(m.DecoderBias)
	in := LayerInput{Self: AttentionMask{Causal: true, Bias: m.DecoderBias.Forward(td, td, 0)}, Memory: memory}
	if attend != nil {
		in.Self.Masked = PaddingMask(attend) // [B, 1, 1, Td]
	}
	if memoryAttend != nil {
		in.Cross.Masked = PaddingMask(memoryAttend) // [B, 1, 1, Te]
	}
	x = m.Decoder.Forward(p, x, in, nil)
	beforeForward(m.DecoderNorm, m.Output)
	x = m.dropHidden(p, m.DecoderNorm.Forward(x), "decoder.final.dropout")
	x = tensor.Scale(x, 1/math.Sqrt(float64(m.Config.Hidden))) // tied output: C^-0.5
	return m.Output.Forward(p, x)                              // [B, Td, Vp/tp]
}

// Forward encodes in.IDs and decodes in.DecoderIDs, returning the logits [B, Td, Vp/tp].
// Under sequence parallelism Te and Td must be divisible by tp (the SP mappings panic
// otherwise).
func (m *T5) Forward(p *Pass, in T5Input) *tensor.Tensor {
	memory := m.Encode(p, in.IDs, in.Attend)
	return m.Decode(p, in.DecoderIDs, in.DecoderAttend, memory, in.Attend)
}

// Loss returns the mean cross entropy of logits [B, Td, Vp/tp] against labels [B, Td]
// over the labels that are not -100 (the true vocabulary only), and the per-token losses.
func (m *T5) Loss(p *Pass, logits, labels *tensor.Tensor) (mean, perToken *tensor.Tensor) {
	perToken = VocabParallelCrossEntropy(p, m.region.tp, logits, labels,
		CrossEntropyOptions{Vocab: m.Config.Vocab, Ignore: true, IgnoreIndex: -100})
	return MeanLoss(perToken, LabelMask(labels, -100, perToken.DType())), perToken
}

// T5ShiftRight returns the decoder input ids [B, T] for labels [B, T] as Hugging Face's
// T5 does: start, then labels[:, :T−1], with -100 replaced by pad.
func T5ShiftRight(labels *tensor.Tensor, start, pad int64) *tensor.Tensor {
	l := tensor.ToSlice[int64](labels)
	t := labels.Dim(1)
	out := make([]int64, len(l))
	for i := range out {
		switch {
		case i%t == 0:
			out[i] = start
		case l[i-1] == -100:
			out[i] = pad
		default:
			out[i] = l[i-1]
		}
	}
	return tensor.FromSlice(labels.Device(), out, labels.Shape()...)
}
