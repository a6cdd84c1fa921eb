package tune

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// trial builds a TrialResult with rungs at the given iterations and losses; Final is
// the last loss (NaN without rungs).
func trial(id int, state string, rungs ...RungLoss) TrialResult {
	t := TrialResult{ID: id, State: state, Rungs: rungs, Final: math.NaN()}
	if len(rungs) > 0 {
		t.Final = rungs[len(rungs)-1].ValidLoss
	}
	return t
}

func ids(ts []TrialResult) []int {
	out := make([]int, len(ts))
	for i, t := range ts {
		out[i] = t.ID
	}
	return out
}

func TestRank(t *testing.T) {
	r100 := func(l float64) RungLoss { return RungLoss{100, l} }
	r300 := func(l float64) RungLoss { return RungLoss{300, l} }
	tests := []struct {
		name   string
		trials []TrialResult
		want   []int
	}{
		{"deeper rung first, whatever the loss",
			[]TrialResult{trial(1, "stopped", r100(3.0)), trial(2, "finished", r100(4), r300(3.9))}, []int{2, 1}},
		{"lower final loss first at the same depth",
			[]TrialResult{trial(1, "finished", r300(3.5)), trial(2, "finished", r300(3.2)), trial(3, "finished", r300(3.4))}, []int{2, 3, 1}},
		{"ties by ID",
			[]TrialResult{trial(5, "stopped", r100(3)), trial(2, "stopped", r100(3)), trial(4, "stopped", r100(3))}, []int{2, 4, 5}},
		{"failed last, by ID, even with a good loss",
			[]TrialResult{trial(3, "failed", r100(1)), trial(1, "failed"), trial(2, "stopped", r100(5))}, []int{2, 1, 3}},
		{"NaN final after every number, however deep",
			[]TrialResult{trial(1, "finished", r100(3), r300(math.NaN())), trial(2, "stopped", r100(4)), trial(3, "running"), trial(4, "failed")},
			[]int{2, 1, 3, 4}},
		{"infinite loss ranks below finite ones",
			[]TrialResult{trial(1, "finished", r300(math.Inf(1))), trial(2, "finished", r300(9))}, []int{2, 1}},
		{"running trials ranked by what they reached",
			[]TrialResult{trial(1, "stopped", r100(3)), trial(2, "running", r100(2.5))}, []int{2, 1}},
		{"none", nil, []int{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := ids(tt.trials)
			assert.Equal(t, tt.want, ids(Rank(tt.trials)))
			assert.Equal(t, before, ids(tt.trials), "the input is not reordered")
		})
	}
}

// TestWriteTable: the header, one aligned row a trial in Rank's order, blanks for
// rungs not reached and settings not held, failed trials last with their error's
// first line.
func TestWriteTable(t *testing.T) {
	trials := []TrialResult{
		{ID: 1, State: "stopped", Final: 4.5, Seconds: 12.34, Rungs: []RungLoss{{50, 4.5}},
			Settings: []Setting{{"lr", 0.0001}, {"lr-warmup-iters", int64(0)}, {"lr-decay-style", "cosine"}}},
		{ID: 2, State: "finished", Final: 3.25, Seconds: 75, Rungs: []RungLoss{{50, 4.0}, {150, 3.25}},
			Settings: []Setting{{"lr", 0.0031622776601683794}, {"lr-warmup-iters", int64(20)}, {"lr-decay-style", "linear"}}},
		{ID: 3, State: "failed", Final: math.NaN(), Seconds: 3725, Err: "exit status 1:   out of\nmemory",
			Settings: []Setting{{"lr", 0.03}}},
	}
	var b bytes.Buffer
	require.NoError(t, WriteTable(&b, trials, []Axis{{"lr", true}, {"lr-warmup-iters", false}, {"lr-decay-style", false}}))
	want := "" +
		"rank  trial       lr  lr-warmup-iters  lr-decay-style  loss@50  loss@150  state         time  error\n" +
		"   1      2  0.00316               20  linear           4.0000    3.2500  finished     1m15s\n" +
		"   2      1   0.0001                0  cosine           4.5000            stopped      12.3s\n" +
		"   -      3     0.03                                                      failed    1h02m05s  exit status 1: out of\n"
	assert.Equal(t, want, b.String())

	// Without axes, the settings' flags in the order they first appear (Rank's order).
	b.Reset()
	require.NoError(t, WriteTable(&b, trials[:1], nil))
	assert.Equal(t, ""+
		"rank  trial      lr  lr-warmup-iters  lr-decay-style  loss@50  state     time\n"+
		"   1      1  0.0001                0  cosine           4.5000  stopped  12.3s\n", b.String())
}

func TestShortError(t *testing.T) {
	assert.Equal(t, "a b", shortError("  a \t b \nsecond line", 10))
	assert.Equal(t, "abcd…", shortError("abcdefgh", 5))
	assert.Equal(t, "äöü", shortError("äöü", 3), "counted in runes")
}

// TestWriteConfig: the fixed settings, then best's, each flag once with best's value
// winning; numbers keep their exact value and type.
func TestWriteConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "best.json")
	best := TrialResult{ID: 7, Settings: []Setting{{"lr", 0.0031622776601683794}, {"lr-warmup-iters", int64(20)},
		{"--weight-decay", 0.1}}}
	fixed := []Setting{{"micro-batch-size", int64(4)}, {"lr", 0.5}, {"lr-decay-style", "cosine"}, {"bf16", true}}
	require.NoError(t, WriteConfig(path, best, fixed))
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, `{
  "micro-batch-size": 4,
  "lr-decay-style": "cosine",
  "bf16": true,
  "lr": 0.0031622776601683794,
  "lr-warmup-iters": 20,
  "weight-decay": 0.1
}
`, string(b))
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	assert.Equal(t, 0.0031622776601683794, m["lr"])

	for _, bad := range []any{math.NaN(), math.Inf(-1), []int{1}, nil} {
		err := WriteConfig(path, TrialResult{Settings: []Setting{{"lr", bad}}}, nil)
		assert.ErrorContains(t, err, "setting lr")
	}
	after, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, string(b), string(after), "a failed write leaves the file as it was")
	entries, err := os.ReadDir(filepath.Dir(path))
	require.NoError(t, err)
	assert.Len(t, entries, 1, "and no temporary file")
	assert.False(t, strings.Contains(string(b), "--"))
}
