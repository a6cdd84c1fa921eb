package tune

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestGrid(t *testing.T) {
	s, err := ParseSpace([]byte(`{
		"lr": {"min": 1e-4, "max": 1e-2, "scale": "log", "points": 3},
		"lr-warmup-iters": {"min": 0, "max": 30, "type": "int", "points": 3},
		"lr-decay-style": {"values": ["cosine", "linear"]}}`))
	require.NoError(t, err)
	g, err := NewGrid(s)
	require.NoError(t, err)
	require.Equal(t, 3*3*2, g.Size())
	tests := []struct {
		id   int
		want []Setting
	}{ // the last flag changes fastest; log points 10× apart, int points evenly spaced
		{0, []Setting{{"lr", 1e-4}, {"lr-warmup-iters", int64(0)}, {"lr-decay-style", "cosine"}}},
		{1, []Setting{{"lr", 1e-4}, {"lr-warmup-iters", int64(0)}, {"lr-decay-style", "linear"}}},
		{2, []Setting{{"lr", 1e-4}, {"lr-warmup-iters", int64(15)}, {"lr-decay-style", "cosine"}}},
		{6, []Setting{{"lr", 1e-3}, {"lr-warmup-iters", int64(0)}, {"lr-decay-style", "cosine"}}},
		{17, []Setting{{"lr", 1e-2}, {"lr-warmup-iters", int64(30)}, {"lr-decay-style", "linear"}}},
	}
	for _, tt := range tests {
		got, ok := g.Settings(tt.id, nil)
		require.True(t, ok)
		assert.Equal(t, tt.want, got, "grid point %d", tt.id)
	}
	_, ok := g.Settings(18, nil)
	assert.False(t, ok, "past the grid")
}

func TestGridPoints(t *testing.T) {
	tests := []struct {
		name string
		p    Param
		want []any
	}{
		{"linear", Param{Min: 0, Max: 1, Points: 5}, []any{0.0, 0.25, 0.5, 0.75, 1.0}},
		{"log, 4 significant digits", Param{Min: 1, Max: 1000, Log: true, Points: 4}, []any{1.0, 10.0, 100.0, 1000.0}},
		{"log between decades", Param{Min: 1e-4, Max: 1e-2, Log: true, Points: 5}, []any{1e-4, 3.162e-4, 1e-3, 3.162e-3, 1e-2}},
		{"int, repeats dropped", Param{Min: 0, Max: 2, Int: true, Points: 5}, []any{int64(0), int64(1), int64(2)}}, // 0, 0.5→1, 1, 1.5→2, 2
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.p.gridPoints()
			require.Len(t, got, len(tt.want))
			for i := range got {
				assert.InDelta(t, tt.want[i], got[i], 1e-12, "point %d", i) // 1-3 ulp of the log's round trip
			}
		})
	}
}

func TestGridNeedsPoints(t *testing.T) {
	s, err := ParseSpace([]byte(`{"lr": {"min": 1, "max": 2}, "wd": {"min": 1, "max": 2}}`))
	require.NoError(t, err)
	_, err = NewGrid(s)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `--lr: grid sampling needs "points"`)
	assert.Contains(t, err.Error(), `--wd: grid sampling needs "points"`)
}

// TestRandom: draws are a function of (seed, id), within bounds, of the flag's type,
// and uniform on the flag's scale.
func TestRandom(t *testing.T) {
	s, err := ParseSpace([]byte(`{
		"lr": {"min": 1e-4, "max": 1e-2, "scale": "log"},
		"wd": {"min": 0, "max": 1},
		"n": {"min": 1, "max": 3, "type": "int"},
		"style": {"values": ["a", "b"]}}`))
	require.NoError(t, err)
	r := NewRandom(s, 7)
	const n = 4000
	lowLR, lowWD := 0, 0
	counts := map[int64]int{}
	for id := n - 1; id >= 0; id-- { // in reverse: the order does not matter
		got, ok := r.Settings(id, nil)
		require.True(t, ok)
		again, _ := NewRandom(s, 7).Settings(id, nil)
		require.Equal(t, got, again)
		lr, wd, k := got[0].Value.(float64), got[1].Value.(float64), got[2].Value.(int64)
		require.True(t, lr >= 1e-4 && lr <= 1e-2 && wd >= 0 && wd <= 1 && k >= 1 && k <= 3, "%v", got)
		require.Contains(t, []any{"a", "b"}, got[3].Value)
		if lr < 1e-3 { // the log scale's midpoint
			lowLR++
		}
		if wd < 0.5 {
			lowWD++
		}
		counts[k]++
	}
	// Each half has probability 1/2: 4000 draws put it within 0.5 ± 0.04 (5 σ).
	assert.InDelta(t, 0.5, float64(lowLR)/n, 0.04, "log-uniform lr")
	assert.InDelta(t, 0.5, float64(lowWD)/n, 0.04, "uniform wd")
	for k := int64(1); k <= 3; k++ {
		assert.InDelta(t, 1.0/3, float64(counts[k])/n, 0.04, "int %d", k)
	}
	other, _ := NewRandom(s, 8).Settings(0, nil)
	first, _ := r.Settings(0, nil)
	assert.NotEqual(t, first, other, "another seed draws otherwise")
}
