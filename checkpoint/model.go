package checkpoint

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"megago/nn"
	"megago/parallel"
	"megago/tensor"
	"megago/train"
)

// Architectures a Model can name.
const (
	ArchGPT  = "gpt"  // nn.GPT (GPT-2 or Llama-style): nn.GPTConfig
	ArchBERT = "bert" // nn.BERT: nn.BERTConfig
	ArchT5   = "t5"   // nn.T5: nn.T5Config
)

// Model names a model's architecture and its configuration, as recorded in a checkpoint's
// manifest. Config is the nn configuration as JSON, with its layout fields (TP, CP)
// cleared: the same model saved at any layout has the same Model.
type Model struct {
	Arch   string          `json:"arch"`
	Config json.RawMessage `json:"config"`
}

// GPTModel returns the Model of a GPT with configuration cfg.
func GPTModel(cfg nn.GPTConfig) Model {
	cfg.TransformerConfig = cfg.TransformerConfig.Defaults()
	cfg.TP, cfg.CP = 0, 0
	return Model{Arch: ArchGPT, Config: mustJSON(cfg)}
}

// BERTModel returns the Model of a BERT with configuration cfg.
func BERTModel(cfg nn.BERTConfig) Model {
	cfg.TransformerConfig = cfg.TransformerConfig.Defaults()
	cfg.TP, cfg.CP = 0, 0
	if cfg.TypeVocab == 0 {
		cfg.TypeVocab = 2
	}
	return Model{Arch: ArchBERT, Config: mustJSON(cfg)}
}

// T5Model returns the Model of a T5 with configuration cfg.
func T5Model(cfg nn.T5Config) Model {
	cfg.TransformerConfig = cfg.TransformerConfig.Defaults()
	cfg.TP, cfg.CP = 0, 0
	if cfg.DecoderLayers == 0 {
		cfg.DecoderLayers = cfg.NumLayers
	}
	return Model{Arch: ArchT5, Config: mustJSON(cfg)}
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("checkpoint: encoding %T: %v", v, err))
	}
	return b
}

// decode decodes the configuration into cfg, refusing unknown fields.
func (m Model) decode(arch string, cfg any) error {
	if m.Arch != arch {
		return fmt.Errorf("checkpoint: the model is a %q, not a %q", m.Arch, arch)
	}
	dec := json.NewDecoder(bytes.NewReader(m.Config))
	dec.DisallowUnknownFields()
	if err := dec.Decode(cfg); err != nil {
		return fmt.Errorf("checkpoint: %s configuration: %w", arch, err)
	}
	return nil
}

// GPTConfig returns the configuration of a GPT Model.
func (m Model) GPTConfig() (nn.GPTConfig, error) {
	var c nn.GPTConfig
	err := m.decode(ArchGPT, &c)
	return c, err
}

// BERTConfig returns the configuration of a BERT Model.
func (m Model) BERTConfig() (nn.BERTConfig, error) {
	var c nn.BERTConfig
	err := m.decode(ArchBERT, &c)
	return c, err
}

// T5Config returns the configuration of a T5 Model.
func (m Model) T5Config() (nn.T5Config, error) {
	var c nn.T5Config
	err := m.decode(ArchT5, &c)
	return c, err
}

// vocab returns the model's vocabulary, its padding multiple and the names of the
// parameters whose dim 0 is the padded vocabulary.
func (m Model) vocab() (v, multiple int, names []string, err error) {
	switch m.Arch {
	case ArchGPT:
		c, err := m.GPTConfig()
		return c.Vocab, c.VocabMultiple, []string{"embedding.word.weight", "output.weight"}, err
	case ArchBERT:
		c, err := m.BERTConfig()
		return c.Vocab, c.VocabMultiple, []string{"embedding.word.weight", "lm_head.bias"}, err
	case ArchT5:
		c, err := m.T5Config()
		return c.Vocab, c.VocabMultiple, []string{"embedding.word.weight"}, err
	}
	return 0, 0, nil, fmt.Errorf("checkpoint: unknown architecture %q", m.Arch)
}

// layoutFields are configuration fields that may differ between a checkpoint and the
// model it is loaded into: the parallel layout, vocabulary padding and training-only
// settings.
var layoutFields = []string{"TP", "CP", "VocabMultiple", "Dropout", "AttnDropout", "InitStd"}

// Compatible returns nil if a checkpoint of m can be loaded into a model of other: the
// same architecture with the same configuration, up to the layout, vocabulary padding,
// dropout and initialization. The error names every field that differs.
func (m Model) Compatible(other Model) error {
	if m.Arch != other.Arch {
		return fmt.Errorf("checkpoint: the checkpoint holds a %q model, not a %q", m.Arch, other.Arch)
	}
	a, err := configFields(m.Config)
	if err != nil {
		return err
	}
	b, err := configFields(other.Config)
	if err != nil {
		return err
	}
	var diffs []string
	for _, k := range slices.Sorted(maps.Keys(mergeKeys(a, b))) {
		if slices.Contains(layoutFields, k) {
			continue
		}
		if fmt.Sprint(a[k]) != fmt.Sprint(b[k]) {
			diffs = append(diffs, fmt.Sprintf("%s %v, not %v", k, a[k], b[k]))
		}
	}
	if len(diffs) > 0 {
		return fmt.Errorf("checkpoint: the checkpoint holds another %s architecture: %s", m.Arch, strings.Join(diffs, "; "))
	}
	return nil
}

func configFields(js json.RawMessage) (map[string]any, error) {
	var f map[string]any
	if err := json.Unmarshal(js, &f); err != nil {
		return nil, fmt.Errorf("checkpoint: model configuration: %w", err)
	}
	return f, nil
}

func mergeKeys(a, b map[string]any) map[string]any {
	out := maps.Clone(a)
	maps.Copy(out, b)
	return out
}

// Build builds this rank's part of the model on mesh (one model chunk per rank; T5
// needs PP = 1), as train.NewGPTChunks, NewBERTChunks and NewT5 do, and returns its
// parts.
func (m Model) Build(b *nn.Builder, mesh *parallel.Mesh) (train.Parts, error) {
	switch m.Arch {
	case ArchGPT:
		c, err := m.GPTConfig()
		if err != nil {
			return train.Parts{}, err
		}
		chunks, err := train.NewGPTChunks(b, c, mesh, 1)
		if err != nil {
			return train.Parts{}, err
		}
		return train.GPTParts(chunks), nil
	case ArchBERT:
		c, err := m.BERTConfig()
		if err != nil {
			return train.Parts{}, err
		}
		chunks, err := train.NewBERTChunks(b, c, mesh, 1)
		if err != nil {
			return train.Parts{}, err
		}
		return train.BERTParts(chunks), nil
	case ArchT5:
		c, err := m.T5Config()
		if err != nil {
			return train.Parts{}, err
		}
		t5, err := train.NewT5(b, c, mesh)
		if err != nil {
			return train.Parts{}, err
		}
		return train.Parts{Chunks: [][]*nn.Param{t5.Params()}}, nil
	}
	return train.Parts{}, fmt.Errorf("checkpoint: unknown architecture %q", m.Arch)
}

// Converter returns the model's Hugging Face converter: the whole model built at TP = 1
// on the CPU (its parameters are not used).
func (m Model) Converter() (nn.HFConverter, error) {
	b := &nn.Builder{Dev: tensor.NewCPU(), DType: tensor.F32, RNG: tensor.NewRNG(0), TP: parallel.Self()}
	switch m.Arch {
	case ArchGPT:
		c, err := m.GPTConfig()
		if err != nil {
			return nil, err
		}
		return nn.NewGPT(b, c, nn.Stage{})
	case ArchBERT:
		c, err := m.BERTConfig()
		if err != nil {
			return nil, err
		}
		return nn.NewBERT(b, c, nn.Stage{})
	case ArchT5:
		c, err := m.T5Config()
		if err != nil {
			return nil, err
		}
		return nn.NewT5(b, c, nn.Stage{})
	}
	return nil, fmt.Errorf("checkpoint: unknown architecture %q", m.Arch)
}
