package nn

import "strings"

// IsMoELayer reports whether layer i of numLayers has a mixture-of-experts block
// instead of the dense MLP: never without experts; else LayerPattern's i-th entry is
// "1", or, without a pattern, i is a multiple of LayerFreq (0 means 1: every layer).
func (c MoEConfig) IsMoELayer(i, numLayers int) bool {
	if c.NumExperts == 0 || i < 0 || i >= numLayers {
		return false
	}
	if c.LayerPattern != "" {
		parts := strings.Split(c.LayerPattern, ",")
		return i < len(parts) && strings.TrimSpace(parts[i]) == "1"
	}
	freq := max(c.LayerFreq, 1)
	return i%freq == 0
}
