package checkpoint

import (
	"cmp"
	"fmt"
	"math"
	"strings"

	"megago/nn"
)

// Sizes read from a file (config.json, Megatron's arguments, a manifest) are untrusted:
// a model built from them allocates and initializes every parameter before a tensor is
// read, so a vocabulary of 10^12 would ask for terabytes. Before building a model from
// such sizes, checkSize compares a lower bound of its parameter count, computed from the
// configuration alone, with the elements of the tensors actually present; the model can
// then be no larger than the files it is read from.

// transformerSize returns a lower bound of the number of parameters of a transformer of
// configuration c with the given number of layers and extra parameters: the word
// embedding, the learned position table, and per layer the query and output projections
// and two MLP matrices (in an MoE layer two per expert, of the experts' hidden size). It
// is computed in float64, so absurd sizes cannot overflow, and refuses a negative size.
func transformerSize(c nn.TransformerConfig, layers int, extra float64) (float64, nn.TransformerConfig, error) {
	c = c.Defaults()
	for _, f := range []struct {
		name string
		v    int
	}{{"NumLayers", c.NumLayers}, {"Hidden", c.Hidden}, {"Heads", c.Heads}, {"KVHeads", c.KVHeads},
		{"HeadSize", c.HeadSize}, {"FFNHidden", c.FFNHidden}, {"Vocab", c.Vocab}, {"MaxPosition", c.MaxPosition},
		{"RelativeBuckets", c.RelativeBuckets}, {"layers", layers}, {"MoE.NumExperts", c.MoE.NumExperts},
		{"MoE.FFNHidden", c.MoE.FFNHidden}} {
		if f.v < 0 {
			return 0, c, fmt.Errorf("%s = %d must be ≥ 0", f.name, f.v)
		}
	}
	C := float64(c.Hidden)
	moe := moeLayerCount(c, layers)
	experts := float64(c.MoE.NumExperts) * 2 * C * float64(cmp.Or(c.MoE.FFNHidden, c.FFNHidden))
	n := float64(c.Vocab)*C + float64(layers)*2*C*float64(c.Heads)*float64(c.HeadSize) +
		(float64(layers)-moe)*2*C*float64(c.FFNHidden) + moe*experts + extra
	if c.Position == nn.LearnedPositions {
		n += float64(c.MaxPosition) * C
	}
	return n, c, nil
}

// moeLayerCount returns how many of the given layers of c have experts, by the rule of
// nn.MoEConfig.IsMoELayer but without a loop over the layers, whose number is untrusted here.
func moeLayerCount(c nn.TransformerConfig, layers int) float64 {
	switch {
	case c.MoE.NumExperts == 0:
		return 0
	case c.MoE.LayerPattern != "":
		n := 0
		for i, p := range strings.Split(c.MoE.LayerPattern, ",") {
			if i < layers && strings.TrimSpace(p) == "1" {
				n++
			}
		}
		return float64(n)
	}
	return math.Ceil(float64(layers) / float64(max(c.MoE.LayerFreq, 1)))
}

// checkSize returns an error when the model m describes needs more parameters than
// present, the number of elements of the tensors it is to be read from (what names
// them: "the tensors of FILE"), or when padding its vocabulary alone would.
func (m Model) checkSize(present int64, what string) error {
	a, err := m.arch()
	if err != nil {
		return err
	}
	need, c, err := a.size(m)
	if err != nil {
		return fmt.Errorf("checkpoint: %s model configuration: %w", m.Arch, err)
	}
	dims := fmt.Sprintf("vocabulary %d, hidden %d, %d layers, %d heads of %d, MLP %d", c.Vocab, c.Hidden, c.NumLayers, c.Heads, c.HeadSize, c.FFNHidden)
	if need > float64(present) {
		return fmt.Errorf("checkpoint: the %s configuration (%s) needs at least %.4g parameters, but %s have only %d elements: its sizes do not match them",
			m.Arch, dims, need, what, present)
	}
	v, multiple, names, err := a.vocab(m)
	if err != nil {
		return err
	}
	if multiple == 0 {
		multiple = 128 // nn.PaddedVocab's default
	}
	if multiple < 0 {
		return fmt.Errorf("checkpoint: %s model configuration: VocabMultiple = %d must be ≥ 0", m.Arch, multiple)
	}
	padded := math.Ceil(float64(v)/float64(multiple)) * float64(multiple)
	if pad := float64(len(names)) * (padded - float64(v)) * float64(c.Hidden); pad > float64(present) {
		return fmt.Errorf("checkpoint: padding the vocabulary %d of the %s model to a multiple of %d adds %.4g parameters, but %s have only %d elements",
			v, m.Arch, multiple, pad, what, present)
	}
	return nil
}
