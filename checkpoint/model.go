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
)

// Architectures a Model can name.
const (
	ArchGPT  = "gpt"  // nn.GPT (GPT-2 or Llama-style): nn.GPTConfig
	ArchBERT = "bert" // nn.BERT: nn.BERTConfig
	ArchT5   = "t5"   // nn.T5: nn.T5Config
)

// Model names a model's architecture and its configuration, as recorded in a checkpoint's
// manifest. Config is the nn configuration as JSON, with its layout fields (TP, CP,
// CPCommType, CPHierarchy and the experts' MoE.EP, MoE.ETP) cleared: the same model saved at any layout has the same
// Model.
type Model struct {
	Arch   string          `json:"arch"`
	Config json.RawMessage `json:"config"`
}

// GPTModel returns the Model of a GPT with configuration cfg.
func GPTModel(cfg nn.GPTConfig) Model {
	cfg.TransformerConfig = cfg.TransformerConfig.Defaults()
	cfg.TransformerConfig = clearLayout(cfg.TransformerConfig)
	cfg.MoE.EP, cfg.MoE.ETP = 0, 0
	return Model{Arch: ArchGPT, Config: mustJSON(cfg)}
}

// BERTModel returns the Model of a BERT with configuration cfg.
func BERTModel(cfg nn.BERTConfig) Model {
	cfg.TransformerConfig = cfg.TransformerConfig.Defaults()
	cfg.TransformerConfig = clearLayout(cfg.TransformerConfig)
	if cfg.TypeVocab == 0 {
		cfg.TypeVocab = 2
	}
	return Model{Arch: ArchBERT, Config: mustJSON(cfg)}
}

// T5Model returns the Model of a T5 with configuration cfg.
func T5Model(cfg nn.T5Config) Model {
	cfg.TransformerConfig = cfg.TransformerConfig.Defaults()
	cfg.TransformerConfig = clearLayout(cfg.TransformerConfig)
	if cfg.DecoderLayers == 0 {
		cfg.DecoderLayers = cfg.NumLayers
	}
	return Model{Arch: ArchT5, Config: mustJSON(cfg)}
}

// clearLayout returns c without its layout fields: TP and the context-parallel CP,
// CPCommType and CPHierarchy.
func clearLayout(c nn.TransformerConfig) nn.TransformerConfig {
	c.TP, c.CP, c.CPCommType, c.CPHierarchy = 0, 0, "", ""
	return c
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

// configAs returns the configuration of a Model of architecture arch as a C.
func configAs[C any](m Model, arch string) (C, error) {
	var c C
	err := m.decode(arch, &c)
	return c, err
}

// GPTConfig returns the configuration of a GPT Model.
func (m Model) GPTConfig() (nn.GPTConfig, error) { return configAs[nn.GPTConfig](m, ArchGPT) }

// BERTConfig returns the configuration of a BERT Model.
func (m Model) BERTConfig() (nn.BERTConfig, error) { return configAs[nn.BERTConfig](m, ArchBERT) }

// T5Config returns the configuration of a T5 Model.
func (m Model) T5Config() (nn.T5Config, error) { return configAs[nn.T5Config](m, ArchT5) }

// arch returns what checkpoint knows of m's architecture (see architectures).
func (m Model) arch() (architecture, error) {
	a, ok := architectures[m.Arch]
	if !ok {
		return nil, fmt.Errorf("checkpoint: unknown architecture %q", m.Arch)
	}
	return a, nil
}

// vocab returns the model's vocabulary, its padding multiple and the names of the
// parameters whose dim 0 is the padded vocabulary.
func (m Model) vocab() (v, multiple int, names []string, err error) {
	a, err := m.arch()
	if err != nil {
		return 0, 0, nil, err
	}
	return a.vocab(m)
}

// layoutFields are configuration fields that may differ between a checkpoint and the
// model it is loaded into: the parallel layout, vocabulary padding, training-only
// settings, and how the MoE layers compute (the same values either way); a nested
// field is named by its path.
var layoutFields = []string{"TP", "CP", "CPCommType", "CPHierarchy", "VocabMultiple", "Dropout", "AttnDropout", "InitStd",
	"MoE.EP", "MoE.ETP", "MoE.Dispatcher", "MoE.GroupedGEMM"}

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
		if !sameField(a[k], b[k]) {
			diffs = append(diffs, fmt.Sprintf("%s %v, not %v", k, fieldText(a[k]), fieldText(b[k])))
		}
	}
	if len(diffs) > 0 {
		return fmt.Errorf("checkpoint: the checkpoint holds another %s architecture: %s", m.Arch, strings.Join(diffs, "; "))
	}
	return nil
}

// sameField reports whether two configuration values are the same, a missing field
// (omitted as empty, or absent from an older checkpoint) being the same as zero.
func sameField(x, y any) bool {
	zero := func(v any) bool { return v == nil || v == 0.0 || v == "" || v == false }
	if zero(x) || zero(y) {
		return zero(x) && zero(y)
	}
	return fmt.Sprint(x) == fmt.Sprint(y)
}

// fieldText returns a configuration value as Compatible's error shows it.
func fieldText(v any) string {
	if v == nil {
		return "unset"
	}
	return fmt.Sprint(v)
}

// configFields returns the fields of a JSON configuration by their paths: a nested
// object's fields as "MoE.TopK".
func configFields(js json.RawMessage) (map[string]any, error) {
	var f map[string]any
	if err := json.Unmarshal(js, &f); err != nil {
		return nil, fmt.Errorf("checkpoint: model configuration: %w", err)
	}
	out := map[string]any{}
	for k, v := range f {
		sub, ok := v.(map[string]any)
		if !ok {
			out[k] = v
		}
		for sk, sv := range sub {
			out[k+"."+sk] = sv
		}
	}
	return out, nil
}

func mergeKeys(a, b map[string]any) map[string]any {
	out := maps.Clone(a)
	maps.Copy(out, b)
	return out
}

// Build builds this rank's part of the model on mesh (one model chunk per rank; T5
// needs PP = 1), as nn.NewGPTChunks, NewBERTChunks and NewT5OnMesh do, and returns its
// parts.
func (m Model) Build(b *nn.Builder, mesh *parallel.Mesh) (nn.Parts, error) {
	a, err := m.arch()
	if err != nil {
		return nn.Parts{}, err
	}
	return a.build(m, b, mesh)
}

// Converter returns the model's Hugging Face converter: the whole model built at TP = 1
// on the CPU (its parameters are not used).
func (m Model) Converter() (nn.HFConverter, error) {
	a, err := m.arch()
	if err != nil {
		return nil, err
	}
	b := &nn.Builder{Dev: tensor.NewCPU(), DType: tensor.F32, RNG: tensor.NewRNG(0), TP: parallel.Self()}
	return a.converter(m, b)
}
