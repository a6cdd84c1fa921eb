package tune

import (
	"context"
	"math"
	"math/rand/v2"
	"sync"
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

// mixedSpace has every kind of flag: log and linear floats, linear and log ints, a
// list of strings and a list of numbers.
const mixedSpace = `{"lr": {"min": 1e-4, "max": 3e-2, "scale": "log"}, "wd": {"min": 0, "max": 0.2},
	"warmup": {"min": 0, "max": 4, "type": "int"}, "layers": {"min": 1, "max": 16, "type": "int", "scale": "log"},
	"style": {"values": ["cosine", "linear", "constant"]}, "beta2": {"values": [0.95, 0.99, 0.999]}}`

// mixedHistory returns n trials of s drawn at random (seed 9), with losses from a
// formula of their settings and one to three rungs each.
func mixedHistory(t *testing.T, s *Space, n int) []TrialResult {
	t.Helper()
	r := NewRandom(s, 9)
	var h []TrialResult
	for id := range n {
		settings, _ := r.Settings(id, nil)
		loss := math.Abs(math.Log10(settings[0].Value.(float64))+3) + float64(settings[2].Value.(int64))/10
		if settings[4].Value == "linear" {
			loss += 0.5
		}
		var rungs []RungLoss
		for k := range 1 + id%3 {
			rungs = append(rungs, RungLoss{Iteration: 10 << k, ValidLoss: loss + 1/float64(k+1)})
		}
		h = append(h, TrialResult{ID: id, Settings: settings, Rungs: rungs, State: StateStopped, Final: rungs[len(rungs)-1].ValidLoss})
	}
	return h
}

// TestTPESettingsInSpace: every setting TPE proposes lies in the space, with the
// flag's type, and the unit-cube coordinates of a setting give it back.
func TestTPESettingsInSpace(t *testing.T) {
	s, err := ParseSpace([]byte(mixedSpace))
	require.NoError(t, err)
	history := mixedHistory(t, s, 20)
	tpe := NewTPE(s, 1, 5)
	for id := 20; id < 60; id++ {
		got, ok := tpe.Settings(id, history)
		require.True(t, ok)
		require.Len(t, got, len(s.Params))
		for i, p := range s.Params {
			require.Equal(t, p.Flag, got[i].Flag)
			switch v := got[i].Value.(type) {
			case float64:
				if p.Values != nil {
					require.Contains(t, p.Values, v, "--%s", p.Flag)
					break
				}
				require.True(t, v >= p.Min && v <= p.Max, "--%s %v", p.Flag, v)
				require.Equal(t, round4(v), v, "--%s: 4 significant digits", p.Flag)
			case int64:
				require.True(t, p.Int && float64(v) >= p.Min && float64(v) <= p.Max, "--%s %v", p.Flag, v)
			default:
				require.Contains(t, p.Values, v, "--%s", p.Flag)
			}
			back := p.unitOf(got[i].Value)
			require.True(t, back >= 0 && back <= float64(max(len(p.Values), 1)), "--%s unit %v", p.Flag, back)
			if p.Values != nil || p.Int {
				require.Equal(t, got[i].Value, tpe.settingsAt(tpe.unit(got))[i].Value, "--%s: a cell's centre gives its value", p.Flag)
			}
		}
	}
}

// TestTPEDeterministic: trial id's settings are a function of the seed, id and the
// history: the same again, from another sampler; the Random sampler's draws for the
// startup trials and without observations; otherwise what the history teaches.
func TestTPEDeterministic(t *testing.T) {
	s, err := ParseSpace([]byte(mixedSpace))
	require.NoError(t, err)
	history := mixedHistory(t, s, 15)
	random := NewRandom(s, 4)
	for id := range 30 {
		got, _ := NewTPE(s, 4, 10).Settings(id, history[:min(id, len(history))])
		again, _ := NewTPE(s, 4, 10).Settings(id, history[:min(id, len(history))])
		assert.Equal(t, got, again, "trial %d", id)
		draw, _ := random.Settings(id, nil)
		if id < 10 {
			assert.Equal(t, draw, got, "startup trial %d: Random's draw", id)
		} else {
			assert.NotEqual(t, draw, got, "trial %d: from the model", id)
		}
		unseen, _ := NewTPE(s, 4, 10).Settings(id, nil)
		assert.Equal(t, draw, unseen, "trial %d without observations: Random's draw", id)
	}
	other := mixedHistory(t, s, 15)
	other[0].Rungs = append(other[0].Rungs, RungLoss{Iteration: 1000, ValidLoss: 0})
	a, _ := NewTPE(s, 4, 10).Settings(20, history)
	b, _ := NewTPE(s, 4, 10).Settings(20, other)
	assert.NotEqual(t, a, b, "another history, other settings")
}

// TestParzenIntegratesToOne: the estimator's density integrates to 1 over the unit
// cube (Simpson's rule on ranges, a sum over lists' values), with observations near
// the edges where the kernels are truncated; and its draws fall in [0, 1/4] as often
// as the integral of the density there says.
func TestParzenIntegratesToOne(t *testing.T) {
	s, err := ParseSpace([]byte(`{"a": {"min": 0, "max": 1}, "b": {"min": 1, "max": 10, "scale": "log"},
		"c": {"values": ["x", "y", "z"]}}`))
	require.NoError(t, err)
	tests := []struct {
		name   string
		params []Param
		xs     [][]float64
	}{
		{"one range, no observations", s.Params[:1], nil},
		{"one range", s.Params[:1], [][]float64{{0.01}, {0.3}, {0.31}, {0.99}}},
		{"two ranges", s.Params[:2], [][]float64{{0.01, 0.9}, {0.5, 0.02}, {0.7, 0.7}}},
		{"a range and a list", []Param{s.Params[0], s.Params[2]}, [][]float64{{0.05, 0}, {0.6, 2}, {0.62, 2}}},
		{"a list", s.Params[2:], [][]float64{{1}, {1}, {0}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pz := newParzen(tt.params, tt.xs)
			density := func(x []float64) float64 { return math.Exp(pz.logPDF(x)) }
			assert.InDelta(t, 1, integrate(pz.cats, density, 0, 1), 1e-6)
			if pz.cats[0] > 0 {
				return
			}
			// The first coordinate falls in [0, 1/4] with probability the integral there:
			// 20000 draws put the fraction within 5 σ ≤ 0.018 of it.
			want := integrate(pz.cats, density, 0, 0.25)
			rng := rand.New(rand.NewPCG(1, 2))
			in := 0
			for range 20000 {
				x := pz.sample(rng)
				for i, m := range pz.cats {
					require.True(t, x[i] >= 0 && (m == 0 && x[i] <= 1 || m > 0 && x[i] < float64(m)), "%v", x)
				}
				if x[0] <= 0.25 {
					in++
				}
			}
			assert.InDelta(t, want, float64(in)/20000, 0.018)
		})
	}
}

// integrate returns the integral of f over the unit cube with the first coordinate
// limited to [lo, hi] (a range; a list's first coordinate is summed in full), by
// Simpson's rule with 200 intervals on each range and a sum over each list's values.
func integrate(cats []int, f func([]float64) float64, lo, hi float64) float64 {
	x := make([]float64, len(cats))
	var rec func(d int) float64
	rec = func(d int) float64 {
		if d == len(cats) {
			return f(x)
		}
		sum := 0.0
		if cats[d] > 0 {
			for j := range cats[d] {
				x[d] = float64(j)
				sum += rec(d + 1)
			}
			return sum
		}
		a, b := 0.0, 1.0
		if d == 0 {
			a, b = lo, hi
		}
		const n = 200
		h := (b - a) / n
		for i := 0; i <= n; i++ {
			w := 2.0
			switch {
			case i == 0 || i == n:
				w = 1
			case i%2 == 1:
				w = 4
			}
			x[d] = a + float64(i)*h
			sum += w * rec(d+1)
		}
		return sum * h / 3
	}
	return rec(0)
}

// TestTPEResumes: a TPE search (--parallel 1) interrupted and resumed, before and
// after its startup trials, decides what an uninterrupted one does.
func TestTPEResumes(t *testing.T) {
	config := func(t *testing.T, dir string, r SegmentRunner) Config {
		cfg := testConfig(t, dir, r)
		cfg.Sampler, cfg.MaxTrials = NewTPE(cfg.Space, 3, 4), 12
		return cfg
	}
	cfg := config(t, t.TempDir(), &formula{})
	trials, err := Search(context.Background(), cfg)
	require.NoError(t, err)
	fromModel := 0
	for _, tr := range trials {
		if draw, _ := NewRandom(cfg.Space, 3).Settings(tr.ID, nil); tr.ID >= 4 && !assert.ObjectsAreEqual(draw, tr.Settings) {
			fromModel++
		}
	}
	require.Equal(t, 8, fromModel, "trials 4 to 11 come from the model")
	testResumes(t, config, func(segments int) []int { return []int{3, 6, 10, 14, segments} })
}

// countingSampler is a Sampler that records which trials it was asked for.
type countingSampler struct {
	Sampler
	mu    sync.Mutex
	asked []int
}

func (c *countingSampler) Settings(id int, history []TrialResult) ([]Setting, bool) {
	c.mu.Lock()
	c.asked = append(c.asked, id)
	c.mu.Unlock()
	return c.Sampler.Settings(id, history)
}

// TestTPEParallelReplays: a TPE search with 3 segments at once, whose histories depend
// on the order segments end, interrupted and run again, replays the settings of the
// trials it started instead of drawing them again.
func TestTPEParallelReplays(t *testing.T) {
	cfg := testConfig(t, t.TempDir(), nil)
	cfg.Sampler, cfg.MaxTrials, cfg.Parallel = NewTPE(cfg.Space, 3, 4), 12, 3
	before, delay := runInterrupted(t, cfg, 12)
	started := 0
	for _, r := range before {
		if r.Event == eventTrial {
			started++
		}
	}
	require.Greater(t, started, 4, "some trials came from the model before the interruption")
	require.Less(t, started, 12, "and some start after it")

	counting := &countingSampler{Sampler: NewTPE(cfg.Space, 3, 4)}
	cfg.Sampler, cfg.Runner = counting, &formula{delay: delay}
	trials, err := Search(context.Background(), cfg)
	require.NoError(t, err)
	after := decisions(t, cfg.Dir)
	require.Equal(t, before, after[:len(before)], "the recorded decisions stay")
	require.NotEmpty(t, counting.asked)
	for _, id := range counting.asked {
		assert.GreaterOrEqual(t, id, started, "trial %d was started before: its settings are replayed", id)
	}
	require.Len(t, trials, 12)
	for _, r := range before {
		if r.Event == eventTrial {
			assert.Equal(t, encodeSettings(trials[r.ID].Settings), r.Settings, "trial %d", r.ID)
		}
	}
}
