package modelflags

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestParseLayerFreq: Megatron's --moe-layer-freq values expand as Python evaluates
// them (the expected patterns written out by hand).
func TestParseLayerFreq(t *testing.T) {
	for _, tc := range []struct {
		in      string
		freq    int
		pattern string // "" for an integer
	}{
		{"1", 1, ""},
		{"4", 4, ""},
		{"[1,0,1,0]", 0, "1,0,1,0"},
		{"[1, 0, 1, 0,]", 0, "1,0,1,0"},
		{"([1]*3+[0]*1)*2", 0, "1,1,1,0,1,1,1,0"},
		{"([0]+[1]*5)", 0, "0,1,1,1,1,1"},
		{"([1]*3+[0]*2)*2", 0, "1,1,1,0,0,1,1,1,0,0"},
		{"2*[1,0]", 0, "1,0,1,0"},
		{"[1]*(1+2)", 0, "1,1,1"},
		{"[0]*0+[1]", 0, "1"},
		{"[1]*2*2", 0, "1,1,1,1"},
		{"[]+[1]", 0, "1"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			freq, pattern, err := parseLayerFreq(tc.in)
			require.NoError(t, err)
			assert.Equal(t, tc.freq, freq)
			if tc.pattern == "" {
				assert.Nil(t, pattern)
			} else {
				assert.Equal(t, tc.pattern, patternString(pattern))
			}
		})
	}
}

// TestParseLayerFreqRefusals: anything outside the grammar is an error naming the flag.
func TestParseLayerFreqRefusals(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"0", "want an integer N ≥ 1"},
		{"-2", "want an integer N ≥ 1"},
		{"x", "want an integer N ≥ 1"},
		{"[1,2]", "must be 0 (dense layer) or 1 (MoE layer)"},
		{"[10]", "must be 0 (dense layer) or 1 (MoE layer)"},
		{"[1,0", "want , or ]"},
		{"[1,", "want ]"},
		{"[1 0]", "want , or ]"},
		{"([1]*2", "want )"},
		{"[1]*", "unexpected end"},
		{"[1]+2", "cannot add a list and an integer"},
		{"[1]*[0]", "cannot multiply two lists"},
		{"[1]*3)", `unexpected ")"`},
		{"[1]*99999999999999999999", "is larger than"},
		{"[1]*(600*200)", "120000 is larger than 65536"},
		{"[1]*60000*2", "longer than 65536 layers"},
		{"[1,0]*40000", "longer than 65536 layers"},
		{"(2)*3+[1]", "cannot add a list and an integer"},
		{"([1]*3)[0]", `unexpected "[0]"`},
		{"__import__('os')", "want an integer"},
		{"[__import__('os')]", "must be 0 (dense layer) or 1"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			_, _, err := parseLayerFreq(tc.in)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.True(t, strings.HasPrefix(err.Error(), "--moe-layer-freq "), err.Error())
		})
	}
}

// TestExpandLayerFreq: both forms give one 0 or 1 per layer (Megatron's
// moe_layer_pattern: layer i is MoE when i % N == 0).
func TestExpandLayerFreq(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"1", "1,1,1,1,1,1"}, {"2", "1,0,1,0,1,0"}, {"4", "1,0,0,0,1,0"}, {"([1]*1+[0]*2)*2", "1,0,0,1,0,0"},
	} {
		got, err := ExpandLayerFreq(tc.in, 6)
		require.NoError(t, err)
		assert.Equal(t, tc.want, got, tc.in)
	}
}
