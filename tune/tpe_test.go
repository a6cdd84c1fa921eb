package tune

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// bowlSpace is the gpt example's tune space (examples/gpt/tune/space.json).
const bowlSpace = `{"lr": {"min": 1e-4, "max": 3e-2, "scale": "log"},
	"lr-warmup-fraction": {"min": 0, "max": 0.2}, "weight-decay": {"min": 0, "max": 0.2}}`

// bowl is a SegmentRunner whose validation loss is a smooth bowl with its minimum 0
// inside the space, at lr = 10^-4 · 300^0.4 (≈ 9.8e-4), warmup 0.15 and weight decay
// 0.05, where lr and warmup interact, plus a rung term that makes a long warmup look
// worse early (as in the gpt example): bowlFinal + (1/2 + warmup/0.2)·3/iteration.
type bowl struct{}

// bowlFinal is the bowl in a = lr's position on its log scale, b = warmup/0.2 and
// c = weight decay/0.2: 2(a-0.4)² + (a-0.4)(b-0.75) + (b-0.75)²/2 + (c-0.25)²/10.
func bowlFinal(s []Setting) float64 {
	a := (math.Log10(s[0].Value.(float64)) + 4) / math.Log10(300)
	b, c := s[1].Value.(float64)/0.2, s[2].Value.(float64)/0.2
	da, db, dc := a-0.4, b-0.75, c-0.25
	return 2*da*da + da*db + db*db/2 + dc*dc/10
}

func (bowl) RunSegment(_ context.Context, s Segment) (Outcome, error) {
	b := s.Settings[1].Value.(float64) / 0.2
	return Outcome{ValidLoss: bowlFinal(s.Settings) + (0.5+b)*3/float64(s.To)}, nil
}

// bowlSearch runs a search of 30 trials over the bowl with the gpt tune's rungs (17,
// 51, 150; η = 3) and returns the bowl's value at the best trial's settings.
func bowlSearch(t *testing.T, sampler func(*Space) Sampler) float64 {
	t.Helper()
	s, err := ParseSpace([]byte(bowlSpace))
	require.NoError(t, err)
	trials, err := Search(context.Background(), Config{Space: s, Sampler: sampler(s), Rungs: Rungs(17, 150, 3),
		Eta: 3, MaxTrials: 30, Dir: t.TempDir(), Runner: bowl{}, Record: map[string]any{}})
	require.NoError(t, err)
	return bowlFinal(Rank(trials)[0].Settings)
}

// TestTPEFindsTheBowlsMinimum: on the bowl, a TPE search's best trial lies closer to
// the minimum (by the bowl's value there) than a random search's with the same
// trials, on average over seeds and for most of them.
func TestTPEFindsTheBowlsMinimum(t *testing.T) {
	var sumTPE, sumRandom float64
	better := 0
	seeds := []uint64{1, 2, 3, 4, 5, 6}
	for _, seed := range seeds {
		tpe := bowlSearch(t, func(s *Space) Sampler { return NewTPE(s, seed, DefaultStartupTrials) })
		random := bowlSearch(t, func(s *Space) Sampler { return NewRandom(s, seed) })
		t.Logf("seed %d: bowl at the best trial: tpe %.4f, random %.4f", seed, tpe, random)
		sumTPE, sumRandom = sumTPE+tpe, sumRandom+random
		if tpe < random {
			better++
		}
	}
	n := float64(len(seeds))
	t.Logf("mean: tpe %.4f, random %.4f", sumTPE/n, sumRandom/n)
	assert.Less(t, sumTPE/n, sumRandom/n)
	assert.GreaterOrEqual(t, better, len(seeds)-1)
}
