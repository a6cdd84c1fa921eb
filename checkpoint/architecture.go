package checkpoint

import (
	"fmt"
	"slices"

	"megago/nn"
	"megago/parallel"
)

// architecture is what checkpoint needs of one architecture, given a Model of it: its
// vocabulary-padded parameters, this rank's part of it on a mesh, its Hugging Face
// converter and config.json. Each method decodes the Model's configuration and returns
// the decoding error.
type architecture interface {
	vocab(m Model) (v, multiple int, names []string, err error)
	size(m Model) (minParams float64, c nn.TransformerConfig, err error)
	build(m Model, b *nn.Builder, mesh *parallel.Mesh) (nn.Parts, error)
	converter(m Model, b *nn.Builder) (nn.HFConverter, error)
	hfConfig(m Model, cfg map[string]any) error
}

// architectures is the factory: each architecture a Model can name, by name.
var architectures = map[string]architecture{
	ArchGPT: archOf[nn.GPTConfig]{
		vocabNames: []string{"embedding.word.weight", "output.weight"},
		vocabOf:    func(c nn.GPTConfig) (int, int) { return c.Vocab, c.VocabMultiple },
		sizeOf: func(c nn.GPTConfig) (float64, nn.TransformerConfig, error) {
			return transformerSize(c.TransformerConfig, c.NumLayers, 0)
		},
		parts: chunkParts(nn.NewGPTChunks, nn.GPTParts),
		whole: gptConverter,
		hf:    gptHFConfig,
	},
	ArchBERT: archOf[nn.BERTConfig]{
		vocabNames: []string{"embedding.word.weight", "lm_head.bias"},
		vocabOf:    func(c nn.BERTConfig) (int, int) { return c.Vocab, c.VocabMultiple },
		sizeOf: func(c nn.BERTConfig) (float64, nn.TransformerConfig, error) {
			if c.TypeVocab < 0 {
				return 0, c.TransformerConfig, fmt.Errorf("TypeVocab = %d must be ≥ 0", c.TypeVocab)
			}
			return transformerSize(c.TransformerConfig, c.NumLayers, float64(c.TypeVocab)*float64(c.Hidden))
		},
		parts: chunkParts(nn.NewBERTChunks, nn.BERTParts),
		whole: wholeModel(nn.NewBERT),
	},
	ArchT5: archOf[nn.T5Config]{
		vocabNames: []string{"embedding.word.weight"},
		vocabOf:    func(c nn.T5Config) (int, int) { return c.Vocab, c.VocabMultiple },
		sizeOf: func(c nn.T5Config) (float64, nn.TransformerConfig, error) {
			dec := c.DecoderLayers
			if dec == 0 {
				dec = c.NumLayers
			}
			if dec < 0 {
				return 0, c.TransformerConfig, fmt.Errorf("DecoderLayers = %d must be ≥ 0", dec)
			}
			return transformerSize(c.TransformerConfig, c.NumLayers+dec, 0)
		},
		parts: func(b *nn.Builder, c nn.T5Config, mesh *parallel.Mesh) (nn.Parts, error) {
			t5, err := nn.NewT5OnMesh(b, c, mesh)
			if err != nil {
				return nn.Parts{}, err
			}
			return nn.T5Parts(t5), nil
		},
		whole: wholeModel(nn.NewT5),
	},
}

// archOf is the architecture of the models an nn configuration C describes.
type archOf[C any] struct {
	// vocabNames are the parameters whose dim 0 is the padded vocabulary.
	vocabNames []string
	// vocabOf returns the vocabulary and its padding multiple.
	vocabOf func(C) (v, multiple int)
	// sizeOf returns a lower bound of the model's parameter count, computed from the
	// configuration without building anything (see checkSize), and its transformer
	// configuration.
	sizeOf func(C) (float64, nn.TransformerConfig, error)
	// parts builds this rank's part of the model on a mesh, one model chunk per rank.
	parts func(*nn.Builder, C, *parallel.Mesh) (nn.Parts, error)
	// whole builds the whole model.
	whole func(*nn.Builder, C) (nn.HFConverter, error)
	// hf, if not nil, completes the converter's config.json fields or refuses the
	// configuration.
	hf func(C, map[string]any) error
}

func (a archOf[C]) vocab(m Model) (v, multiple int, names []string, err error) {
	c, err := configAs[C](m, m.Arch)
	v, multiple = a.vocabOf(c)
	return v, multiple, slices.Clone(a.vocabNames), err
}

func (a archOf[C]) size(m Model) (float64, nn.TransformerConfig, error) {
	c, err := configAs[C](m, m.Arch)
	if err != nil {
		return 0, nn.TransformerConfig{}, err
	}
	return a.sizeOf(c)
}

func (a archOf[C]) build(m Model, b *nn.Builder, mesh *parallel.Mesh) (nn.Parts, error) {
	c, err := configAs[C](m, m.Arch)
	if err != nil {
		return nn.Parts{}, err
	}
	return a.parts(b, c, mesh)
}

func (a archOf[C]) converter(m Model, b *nn.Builder) (nn.HFConverter, error) {
	c, err := configAs[C](m, m.Arch)
	if err != nil {
		return nil, err
	}
	return a.whole(b, c)
}

func (a archOf[C]) hfConfig(m Model, cfg map[string]any) error {
	c, err := configAs[C](m, m.Arch)
	if err != nil || a.hf == nil {
		return err
	}
	return a.hf(c, cfg)
}

// chunkParts returns the parts function of an architecture whose model newChunks builds
// in chunks on a mesh and partsOf collects.
func chunkParts[C, M any](newChunks func(*nn.Builder, C, *parallel.Mesh, int) ([]M, error),
	partsOf func([]M) nn.Parts) func(*nn.Builder, C, *parallel.Mesh) (nn.Parts, error) {
	return func(b *nn.Builder, c C, mesh *parallel.Mesh) (nn.Parts, error) {
		chunks, err := newChunks(b, c, mesh, 1)
		if err != nil {
			return nn.Parts{}, err
		}
		return partsOf(chunks), nil
	}
}

// wholeModel returns the whole function of an architecture whose model newModel builds:
// the whole model, the zero nn.Stage.
func wholeModel[C any, M nn.HFConverter](newModel func(*nn.Builder, C, nn.Stage) (M, error),
) func(*nn.Builder, C) (nn.HFConverter, error) {
	return func(b *nn.Builder, c C) (nn.HFConverter, error) {
		return newModel(b, c, nn.Stage{})
	}
}
