package tune

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseSpace(t *testing.T) {
	s, err := ParseSpace([]byte(`{
		"lr": {"min": 1e-4, "max": 3e-2, "scale": "log", "points": 4},
		"--lr_warmup_iters": {"min": 0, "max": 30, "type": "int"},
		"weight-decay": {"values": [0, 0.1]},
		"micro-batch-size": {"values": [2, 4]},
		"lr-decay-style": {"values": ["cosine", "linear"]}
	}`))
	require.NoError(t, err)
	want := []Param{
		{Flag: "lr", Min: 1e-4, Max: 3e-2, Log: true, Points: 4},
		{Flag: "lr-warmup-iters", Min: 0, Max: 30, Int: true},
		{Flag: "weight-decay", Values: []any{0.0, 0.1}}, // an integer among floats is a float
		{Flag: "micro-batch-size", Values: []any{int64(2), int64(4)}},
		{Flag: "lr-decay-style", Values: []any{"cosine", "linear"}},
	}
	assert.Equal(t, want, s.Params, "in the file's order, names without dashes or underscores")
	assert.Equal(t, []Axis{{"lr", true}, {"lr-warmup-iters", false}, {"weight-decay", false},
		{"micro-batch-size", false}, {"lr-decay-style", false}}, s.Axes())
	assert.Equal(t, []any{int64(0), int64(30)}, s.Params[1].Extremes())
}

// TestParseSpaceErrors: every problem is reported at once, each naming its flag.
func TestParseSpaceErrors(t *testing.T) {
	tests := []struct {
		name, space string
		want        []string
	}{
		{"not an object", `[1]`, []string{"not a JSON object of flags"}},
		{"not JSON", `{"lr": {"min": 1,}}`, []string{"not valid JSON"}},
		{"empty", `{}`, []string{"no flags to search"}},
		{"entry not an object", `{"lr": 0.1}`, []string{`--lr: want an object`}},
		{"unknown key", `{"lr": {"min": 1, "max": 2, "scael": "log"}}`, []string{`--lr: unknown key "scael"`}},
		{"empty range", `{"lr": {"min": 2, "max": 2}}`, []string{"--lr: empty range: min 2 must be below max 2"}},
		{"inverted range", `{"lr": {"min": 3, "max": 2}}`, []string{"--lr: empty range"}},
		{"log of zero", `{"lr": {"min": 0, "max": 2, "scale": "log"}}`, []string{"--lr: a log scale needs min > 0, got 0"}},
		{"bad scale", `{"lr": {"min": 1, "max": 2, "scale": "exp"}}`, []string{`--lr: "scale" must be "linear" or "log", got "exp"`}},
		{"bad type", `{"lr": {"min": 1, "max": 2, "type": 3}}`, []string{`--lr: "type" must be "float" or "int", got 3`}},
		{"string bound", `{"lr": {"min": "1", "max": 2}}`, []string{`--lr: "min" must be a number, got "1"`}},
		{"missing bound", `{"lr": {"min": 1}}`, []string{`--lr: a range needs "max"`}},
		{"fractional int", `{"n": {"min": 1.5, "max": 4, "type": "int"}}`, []string{`--n: "min" must be an integer`}},
		{"one point", `{"lr": {"min": 1, "max": 2, "points": 1}}`, []string{`--lr: "points" must be an integer ≥ 2, got 1`}},
		{"empty values", `{"lr": {"values": []}}`, []string{`--lr: "values" is empty`}},
		{"values not a list", `{"lr": {"values": 3}}`, []string{`--lr: "values" must be a list, got 3`}},
		{"mixed values", `{"lr": {"values": [1, "a"]}}`, []string{`--lr: "values" mix kinds: number and string`}},
		{"object value", `{"lr": {"values": [{}]}}`, []string{`--lr: "values"[0]: want a number, string or boolean`}},
		{"values and range", `{"lr": {"values": [1], "min": 0}}`, []string{`--lr: "min" and "values" exclude each other`}},
		{"set by tune", `{"train-iters": {"values": [1]}, "save": {"values": ["x"]}}`,
			[]string{"--train-iters: set by the search", "--save: set by the search"}},
		{"twice", `{"lr": {"values": [1]}, "--lr": {"values": [2]}}`, []string{"--lr: given twice"}},
		{"all at once", `{"lr": {"min": 0, "max": 1, "scale": "log"}, "wd": {"min": 1, "max": 0}, "x": {"values": []}}`,
			[]string{"3 problems:", "--lr: a log scale", "--wd: empty range", `--x: "values" is empty`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseSpace([]byte(tt.space))
			require.Error(t, err)
			for _, w := range tt.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestParseFixed(t *testing.T) {
	got, err := ParseFixed([]string{"--num-layers", "2", "-lr=0.5", "--bf16", "--data-path", "0.3", "A", "0.7", "B",
		"--min-lr", "-1", "--lr-decay-style", "cosine"})
	require.NoError(t, err)
	assert.Equal(t, []Setting{{"num-layers", int64(2)}, {"lr", 0.5}, {"bf16", true}, {"data-path", "0.3 A 0.7 B"},
		{"min-lr", int64(-1)}, {"lr-decay-style", "cosine"}}, got)

	_, err = ParseFixed([]string{"--train-iters", "5", "--out-dir", "x"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--train-iters: set by the search")
	assert.Contains(t, err.Error(), "--out-dir: set by the search")
	_, err = ParseFixed([]string{"word"})
	assert.ErrorContains(t, err, `"word" is not a flag`)
}

func TestArgs(t *testing.T) {
	got := Args([]Setting{{"lr", 3e-4}, {"num-layers", int64(2)}, {"bf16", false}, {"lr-decay-style", "cosine"}})
	assert.Equal(t, []string{"--lr", "0.0003", "--num-layers", "2", "--bf16=false", "--lr-decay-style", "cosine"}, got)
}
