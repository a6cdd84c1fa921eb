package nn

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// Names of MoEConfig's string-valued choices ("" means the first of each).
var (
	moeScoreFunctions = []string{"softmax", "sigmoid"}
	moeLoadBalancings = []string{"aux_loss", "seq_aux_loss", "global_aux_loss", "none"}
	moeDropPolicies   = []string{"probs", "position"}
)

// defaultBiasUpdateRate is Megatron's --moe-router-bias-update-rate default.
const defaultBiasUpdateRate = 1e-3

// topK returns TopK with its default (2).
func (c MoEConfig) topK() int {
	if c.TopK == 0 {
		return 2
	}
	return c.TopK
}

// biasUpdateRate returns BiasUpdateRate with its default (1e-3).
func (c MoEConfig) biasUpdateRate() float64 {
	if c.BiasUpdateRate == 0 {
		return defaultBiasUpdateRate
	}
	return c.BiasUpdateRate
}

// IsMoELayer reports whether layer i (0-based) of a model of numLayers layers has a
// mixture-of-experts block instead of the dense MLP, as Megatron's --moe-layer-freq says:
// never without experts (NumExperts 0); with LayerPattern, when its i-th comma-separated
// entry is 1; otherwise when i is a multiple of LayerFreq (0 means 1: every layer). It
// returns false for i outside [0, numLayers).
func (c MoEConfig) IsMoELayer(i, numLayers int) bool {
	if c.NumExperts <= 0 || i < 0 || i >= numLayers {
		return false
	}
	if c.LayerPattern != "" {
		parts := strings.Split(c.LayerPattern, ",")
		return i < len(parts) && strings.TrimSpace(parts[i]) == "1"
	}
	return i%max(c.LayerFreq, 1) == 0
}

// validate lists what cannot work in c for a model of numLayers layers, each message
// naming the field (prefixed "MoE."); TransformerConfig.Validate calls it when
// NumExperts > 0. The rules are Megatron's (transformer_config.py and the flags'
// choices): known names, TopK in [1, NumExperts], finite non-negative coefficients,
// PadToCapacity only with a CapacityFactor, expert bias only with the sigmoid score
// function, and a LayerPattern of numLayers entries each 0 or 1.
func (c MoEConfig) validate(numLayers int) []string {
	var errs []string
	bad := func(format string, a ...any) { errs = append(errs, "MoE."+fmt.Sprintf(format, a...)) }
	if k := c.topK(); k < 1 || k > c.NumExperts {
		bad("TopK = %d must be in [1, NumExperts = %d]", k, c.NumExperts)
	}
	for _, f := range []struct {
		name, v string
		allowed []string
	}{
		{"ScoreFunction", c.ScoreFunction, moeScoreFunctions},
		{"LoadBalancing", c.LoadBalancing, moeLoadBalancings},
		{"DropPolicy", c.DropPolicy, moeDropPolicies},
	} {
		if f.v != "" && !slices.Contains(f.allowed, f.v) {
			bad("%s = %q is not one of %s", f.name, f.v, strings.Join(f.allowed, ", "))
		}
	}
	for _, f := range []struct {
		name string
		v    float64
	}{
		{"AuxLossCoeff", c.AuxLossCoeff}, {"ZLossCoeff", c.ZLossCoeff},
		{"CapacityFactor", c.CapacityFactor}, {"BiasUpdateRate", c.BiasUpdateRate},
	} {
		if !(f.v >= 0) || math.IsInf(f.v, 0) {
			bad("%s = %v must be finite and ≥ 0", f.name, f.v)
		}
	}
	if c.PadToCapacity && c.CapacityFactor == 0 {
		bad("PadToCapacity needs a CapacityFactor")
	}
	if c.EnableExpertBias && c.ScoreFunction != "sigmoid" {
		bad("EnableExpertBias needs ScoreFunction \"sigmoid\" (Megatron's rule), not %q", c.ScoreFunction)
	}
	if c.FFNHidden < 0 {
		bad("FFNHidden = %d must be ≥ 0", c.FFNHidden)
	}
	if c.LayerFreq < 0 {
		bad("LayerFreq = %d must be ≥ 0", c.LayerFreq)
	}
	if c.LayerPattern != "" {
		parts := strings.Split(c.LayerPattern, ",")
		if len(parts) != numLayers {
			bad("LayerPattern %q has %d entries, want NumLayers = %d", c.LayerPattern, len(parts), numLayers)
		}
		for i, s := range parts {
			if s = strings.TrimSpace(s); s != "0" && s != "1" {
				bad("LayerPattern entry %d is %q, want 0 or 1", i, s)
				break
			}
		}
	}
	return errs
}
