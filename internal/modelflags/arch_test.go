package modelflags

import (
	"flag"
	"testing"

	"github.com/stretchr/testify/require"

	"megago/nn"
)

// TestFromConfigInvertsApply: the flags of a configuration describe it again.
func TestFromConfigInvertsApply(t *testing.T) {
	for _, args := range [][]string{
		nil,
		{"--normalization", "RMSNorm", "--norm-epsilon", "1e-6", "--swiglu", "--position-embedding-type", "rope",
			"--rotary-base", "500000", "--use-rope-scaling", "--rope-scaling-factor", "32", "--group-query-attention",
			"--num-query-groups", "2", "--disable-bias-linear", "--add-qkv-bias", "--qk-layernorm", "--kv-channels", "16"},
		{"--position-embedding-type", "none", "--rotary-percent", "1"},
		{"--position-embedding-type", "rope", "--rotary-percent", "0.5"},
	} {
		a := Defaults()
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		a.Register(fs)
		require.NoError(t, fs.Parse(args))
		require.Empty(t, a.Check(8, 1))
		c := nn.TransformerConfig{NumLayers: 2, Hidden: 64, Heads: 8, Vocab: 10, MaxPosition: 8}
		a.Apply(&c)
		back, err := FromConfig(c)
		require.NoError(t, err, args)
		require.Equal(t, a, back, args)
	}
	_, err := FromConfig(nn.TransformerConfig{NumLayers: 1, Hidden: 8, Heads: 2, Vocab: 4, PostLN: true})
	require.Error(t, err)
}
