package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"path/filepath"
	"strconv"

	"megago/checkpoint"
	"megago/internal/modelflags"
	"megago/nn"
)

// modelFlags are the flags that describe the model: what --use-checkpoint-args takes
// from the checkpoint (with modelflags.MoEModelFlags).
var modelFlags = append([]string{"num-layers", "hidden-size", "num-attention-heads", "ffn-hidden-size",
	"max-position-embeddings", "make-vocab-size-divisible-by", "untie-embeddings-and-output-weights",
	"normalization", "norm-epsilon", "swiglu", "position-embedding-type", "rotary-base", "rotary-percent",
	"use-rope-scaling", "rope-scaling-factor", "group-query-attention", "num-query-groups", "kv-channels",
	"disable-bias-linear", "add-qkv-bias", "qk-layernorm"}, modelflags.MoEModelFlags...)

// useCheckpointArgs sets the model flags from the GPT configuration recorded in --load's
// latest checkpoint, as Megatron's --use-checkpoint-args does. A model flag given on the
// command line (or in --config) with another value than the checkpoint's is an error:
// the run would silently differ from what the script says.
func (c *config) useCheckpointArgs(fs *flag.FlagSet) error {
	if c.Load == "" {
		return fmt.Errorf("--use-checkpoint-args requires --load")
	}
	it, err := checkpoint.LatestIteration(c.Load)
	if err != nil {
		return fmt.Errorf("--use-checkpoint-args: %w", err)
	}
	man, err := checkpoint.ReadManifest(filepath.Join(c.Load, checkpoint.IterDir(it)))
	if err != nil {
		return fmt.Errorf("--use-checkpoint-args: %w", err)
	}
	if man.Model.Arch != checkpoint.ArchGPT {
		return fmt.Errorf("--use-checkpoint-args: %s holds a %q, not a GPT", c.Load, man.Model.Arch)
	}
	var m nn.GPTConfig
	if err := json.Unmarshal(man.Model.Config, &m); err != nil {
		return fmt.Errorf("--use-checkpoint-args: %s: %w", c.Load, err)
	}
	arch, err := modelflags.FromConfig(m.TransformerConfig)
	if err != nil {
		return fmt.Errorf("--use-checkpoint-args: %s: %w", c.Load, err)
	}
	given := map[string]string{}
	for _, name := range modelFlags {
		given[name] = fs.Lookup(name).Value.String()
	}
	m.TransformerConfig = m.Defaults()
	c.NumLayers, c.HiddenSize, c.NumAttentionHeads, c.FFNHiddenSize = m.NumLayers, m.Hidden, m.Heads, m.FFNHidden
	if m.Position == nn.LearnedPositions {
		c.MaxPositionEmbeddings = m.MaxPosition
	}
	c.MakeVocabSizeDivisibleBy = m.VocabMultiple
	c.UntieEmbeddings = m.Untied
	c.Arch = arch
	c.MoE = modelflags.MoEFromConfig(m.MoE, c.MoE)
	for _, name := range modelFlags {
		if now := fs.Lookup(name).Value.String(); c.Set[name] && now != given[name] && !sameNumber(now, given[name]) &&
			!(name == "moe-layer-freq" && c.sameLayerFreq(now, given[name])) {
			return fmt.Errorf("--%s %s differs from the checkpoint's %s (--use-checkpoint-args takes the model from %s)",
				name, given[name], now, c.Load)
		}
	}
	return nil
}

// sameLayerFreq reports whether two --moe-layer-freq values give the same MoE layers
// ("2" and "[1,0,1,0]" for 4 layers).
func (c *config) sameLayerFreq(a, b string) bool {
	x, err1 := modelflags.ExpandLayerFreq(a, c.NumLayers)
	y, err2 := modelflags.ExpandLayerFreq(b, c.NumLayers)
	return err1 == nil && err2 == nil && x == y
}

// sameNumber reports whether two flag values are the same number written differently
// (1e-6 and 1e-06).
func sameNumber(a, b string) bool {
	x, err1 := strconv.ParseFloat(a, 64)
	y, err2 := strconv.ParseFloat(b, 64)
	return err1 == nil && err2 == nil && x == y
}
