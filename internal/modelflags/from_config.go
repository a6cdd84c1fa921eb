package modelflags

import (
	"fmt"
	"math"

	"megago/nn"
)

// FromConfig returns the flags that describe c (after Defaults) — Apply's inverse, for
// taking a model's settings from a checkpoint (Megatron's --use-checkpoint-args). It
// returns an error for a configuration the flags cannot describe (post-LN, GeLU's erf
// form, ReLU, T5's relative positions, a non-integer rotary base).
func FromConfig(c nn.TransformerConfig) (Arch, error) {
	c = c.Defaults()
	a := Defaults()
	if c.Norm == nn.RMSNormKind {
		a.Normalization = "RMSNorm"
	}
	a.NormEpsilon = c.NormEps
	switch c.Activation {
	case nn.GeLU:
	case nn.SwiGLU:
		a.SwiGLU = true
	default:
		return a, fmt.Errorf("the activation %d has no flag (GeLU or --swiglu)", c.Activation)
	}
	switch c.Position {
	case nn.LearnedPositions:
	case nn.RoPE:
		a.PositionEmbeddingType = "rope"
	case nn.NoPositions:
		a.PositionEmbeddingType = "none"
	default:
		return a, fmt.Errorf("the position encoding %d has no --position-embedding-type", c.Position)
	}
	if c.PostLN || c.NoAttentionScale {
		return a, fmt.Errorf("a post-LN model or one without attention scaling has no flags")
	}
	if c.RoPETheta != math.Trunc(c.RoPETheta) || c.RoPETheta > math.MaxInt32 {
		return a, fmt.Errorf("the rotary base %v is not an integer (--rotary-base)", c.RoPETheta)
	}
	a.RotaryBase = int(c.RoPETheta)
	if c.RotaryPercent != 0 {
		a.RotaryPercent = c.RotaryPercent
	}
	if c.RoPEScaling != 0 {
		a.UseRopeScaling, a.RopeScalingFactor = true, c.RoPEScaling
	}
	if c.KVHeads != c.Heads {
		a.GroupQueryAttention, a.NumQueryGroups = true, c.KVHeads
	}
	if c.Heads > 0 && c.HeadSize*c.Heads != c.Hidden {
		a.KVChannels = c.HeadSize
	}
	a.DisableBiasLinear = !c.Bias
	a.AddQKVBias = c.QKVBias && !c.Bias
	a.QKLayerNorm = c.QKNorm
	return a, nil
}
