package modelflags

import (
	"flag"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"megago/internal/listargs"
	"megago/nn"
)

// parseCP parses args, Megatron's lists joined, as the CP flags.
func parseCP(t *testing.T, args ...string) CP {
	t.Helper()
	c := CPDefaults()
	parseInto(t, &c, listargs.Join(args, CPListFlags...)...)
	return c
}

// TestCPFlagsFillTheConfig: each flag reaches its field of nn.TransformerConfig, in
// Megatron's space-separated form and comma-separated.
func TestCPFlagsFillTheConfig(t *testing.T) {
	for _, tc := range []struct {
		args                       []string
		size                       int
		commType, hierarchy, about string
	}{
		{nil, 1, "", "", ""},
		{[]string{"--context-parallel-size", "2"}, 2, "", "", "CP 2, p2p"},
		{[]string{"--context-parallel-size", "4", "--cp-comm-type", "allgather"}, 4, "allgather", "", "CP 4, allgather"},
		{[]string{"--context-parallel-size", "4", "--cp-comm-type", "a2a+p2p", "--hierarchical-context-parallel-sizes", "2", "2"},
			4, "a2a+p2p", "2,2", "CP 4, a2a+p2p 2×2"},
		{[]string{"--context-parallel-size", "2", "--cp-comm-type", "p2p", "a2a", "all_gather", "a2a"}, 2, "p2p,a2a,all_gather,a2a", "", "CP 2, p2p,a2a,all_gather,a2a"},
		{[]string{"--context-parallel-size=2", "--cp-comm-type=p2p,a2a,p2p,a2a"}, 2, "p2p,a2a,p2p,a2a", "", "CP 2, p2p,a2a,p2p,a2a"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			c := parseCP(t, tc.args...)
			m := nn.TransformerConfig{NumLayers: 4, Hidden: 64, Heads: 8}
			require.Empty(t, c.Check(m, 1, 64, false))
			c.Apply(&m)
			assert.Equal(t, tc.size, m.CP)
			assert.Equal(t, tc.commType, m.CPCommType)
			assert.Equal(t, tc.hierarchy, m.CPHierarchy)
			assert.Equal(t, tc.about, c.Describe())
		})
	}
}

// TestCPFlagsRefused: every value that cannot work is refused, in the flags' words.
func TestCPFlagsRefused(t *testing.T) {
	const seq = 64
	gqa := nn.TransformerConfig{NumLayers: 4, Hidden: 64, Heads: 8, KVHeads: 2}
	for _, tc := range []struct {
		name string
		args []string
		tp   int
		sp   bool
		want string
	}{
		{"zero size", []string{"--context-parallel-size", "0"}, 1, false, "--context-parallel-size must be at least 1, got 0"},
		{"unknown comm type", []string{"--context-parallel-size", "2", "--cp-comm-type", "ring"}, 1, false, `--cp-comm-type "ring": want p2p`},
		{"list not one per layer", []string{"--context-parallel-size", "2", "--cp-comm-type", "p2p", "a2a"}, 1, false, "--cp-comm-type has 2 values and --num-layers is 4"},
		{"hierarchy product", []string{"--context-parallel-size", "4", "--hierarchical-context-parallel-sizes", "2", "3"}, 1, false, "their product 6 is not --context-parallel-size 4"},
		{"hierarchy size below 1", []string{"--context-parallel-size", "4", "--hierarchical-context-parallel-sizes", "0", "4"}, 1, false, "each size must be at least 1"},
		{"a2a+p2p without hierarchy", []string{"--context-parallel-size", "4", "--cp-comm-type", "a2a+p2p"}, 1, false, "--hierarchical-context-parallel-sizes must be set when a2a+p2p"},
		{"a2a+p2p with three levels", []string{"--context-parallel-size", "8", "--cp-comm-type", "a2a+p2p", "--hierarchical-context-parallel-sizes", "2", "2", "2"}, 1, false, "wants two sizes"},
		{"sequence not divisible by 2·CP", []string{"--context-parallel-size", "3"}, 1, false, "--seq-length 64 is not divisible by 2 × --context-parallel-size 3"},
		{"sequence not divisible by 2·CP·TP", []string{"--context-parallel-size", "4"}, 16, true, "--seq-length 64 is not divisible by 2 × --context-parallel-size 4 × --tensor-model-parallel-size 16"},
		{"a2a key/value heads", []string{"--context-parallel-size", "4", "--cp-comm-type", "a2a"}, 1, false, "each TP rank's 8 attention heads and 2 key/value heads must divide by the all-to-all size 4"},
		{"a2a heads per TP rank", []string{"--context-parallel-size", "2", "--cp-comm-type", "a2a"}, 2, false, "each TP rank's 4 attention heads and 1 key/value heads must divide by the all-to-all size 2"},
		{"a2a+p2p heads", []string{"--context-parallel-size", "8", "--cp-comm-type", "a2a+p2p", "--hierarchical-context-parallel-sizes", "4", "2"}, 1, false, "must divide by the all-to-all size 4"},
		{"bad integer", nil, 1, false, ""}, // parse error: below
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.args == nil {
				fs := flag.NewFlagSet("t", flag.ContinueOnError)
				c := CPDefaults()
				c.Register(fs)
				fs.SetOutput(&strings.Builder{})
				require.ErrorContains(t, fs.Parse([]string{"--hierarchical-context-parallel-sizes", "two"}), `"two" is not an integer`)
				return
			}
			errs := parseCP(t, tc.args...).Check(gqa, tc.tp, seq, tc.sp)
			require.Len(t, errs, 1, errs)
			assert.Contains(t, errs[0], tc.want)
		})
	}
	// The same layouts pass where they divide: GQA's 2 groups over a2a at CP 2, SP at CP 2 × TP 2.
	assert.Empty(t, parseCP(t, "--context-parallel-size", "2", "--cp-comm-type", "a2a").Check(gqa, 1, seq, false))
	assert.Empty(t, parseCP(t, "--context-parallel-size", "2").Check(gqa, 2, seq, true))
}
