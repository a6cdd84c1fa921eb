package tune

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// DefaultStartupTrials is the number of trials a TPE sampler draws at random before it
// models the results: Optuna's TPESampler default (n_startup_trials = 10).
const DefaultStartupTrials = 10

// TPE settings taken from Optuna's TPESampler defaults (multivariate = True).
const (
	tpeCandidates  = 24  // n_ei_candidates: draws from l(x), of which the best l/g is taken
	tpePriorWeight = 1.0 // prior_weight: the prior's weight among the kernels (each observation 1 or less)
	tpeMaxGood     = 25  // the good group's size at most (gamma)
	tpeFlatWeights = 25  // the newest observations of a group weigh 1, older ones less (weights)
)

// TPE is a Tree-structured Parzen Estimator sampler (Bergstra et al., "Algorithms for
// Hyper-Parameter Optimization", 2011), multivariate as in Optuna's TPESampler with
// multivariate=True and in BOHB (Falkner et al., 2018): it learns from the rung
// results of earlier trials where to draw the next.
//
// Trials 0 to Startup-1, and any trial started before some trial reached a rung, get
// exactly the Random sampler's draws. After them, trial id's observations are the
// earlier trials that reached at least one rung, ranked as Optuna ranks pruned trials
// and as Rank does: the deepest rung first, then the lowest loss there (a loss that
// is not finite, or a failed trial, last). The best n_good of the n observations are
// "good", the others "bad", with Optuna's n_good = min(⌈n/10⌉, 25), kept between 1 and
// n-1 (with one observation, it is good and the bad density is the prior alone).
//
// Each group becomes a Parzen estimator over the space's unit cube (a range's log or
// linear scale mapped to [0, 1]; an int range's integers as equal cells, as Random
// draws them; a list's values as categories): a weighted mixture with one component
// per observation and one prior component. A component is a product kernel over the
// flags, so the density captures how flags interact (a learning rate that wants a
// long warmup). On a range, an observation's kernel is a normal centred on it,
// truncated to [0, 1], with Optuna's multivariate bandwidth (Scott's rule) σ = 0.2 ·
// n^(-1/(d+4)) for n observations in the group and d flags, clipped to [1/min(100,
// n+2), 1]; the prior's kernel is centred at 1/2 with σ = 1. On a list, an
// observation's kernel puts weight 1 + w on its value and w on each value, w =
// 1/(n+1), normalised; the prior's is uniform. The prior weighs 1; observations weigh
// 1 when the group has at most 25, else Optuna's ramp (the oldest 1/n, rising to 1
// for the newest 25).
//
// Trial id draws 24 candidates from the good density l(x) and takes the one with the
// greatest l(x)/g(x), g the bad density, scored at the settings the candidate gives
// (integers floored into their cell, floats rounded to 4 significant digits like
// Random). Every draw comes from a PCG stream keyed by (seed, id), so trial id's
// settings are a function of the seed, id and the results before it.
type TPE struct {
	space   *Space
	random  *Random
	seed    uint64
	startup int
}

// NewTPE returns a TPE sampler over s whose first startup trials are Random's draws
// with seed. It panics if startup < 0.
func NewTPE(s *Space, seed uint64, startup int) *TPE {
	if startup < 0 {
		panic(fmt.Sprintf("tune: NewTPE: %d startup trials", startup))
	}
	return &TPE{space: s, random: NewRandom(s, seed), seed: seed, startup: startup}
}

// Size returns 0: a TPE sampler has no end.
func (t *TPE) Size() int { return 0 }

// Settings returns trial id's settings given the trials before it.
func (t *TPE) Settings(id int, history []TrialResult) ([]Setting, bool) {
	obs := tpeObservations(history)
	if id < t.startup || len(obs) == 0 {
		return t.random.Settings(id, nil)
	}
	nGood := min(int(math.Ceil(0.1*float64(len(obs)))), tpeMaxGood, len(obs)-1)
	nGood = max(nGood, 1)
	l := newParzen(t.space.Params, t.points(obs[:nGood]))
	g := newParzen(t.space.Params, t.points(obs[nGood:]))
	rng := rand.New(rand.NewPCG(t.seed, uint64(id)))
	var best []Setting
	bestScore := math.Inf(-1)
	for range tpeCandidates {
		settings := t.settingsAt(l.sample(rng))
		u := t.unit(settings)
		if score := l.logPDF(u) - g.logPDF(u); best == nil || score > bestScore {
			best, bestScore = settings, score
		}
	}
	return best, true
}

// tpeObservations returns the trials of history that reached a rung, ranked (Rank),
// each with its Final the loss at its last rung, NaN where that is not finite.
func tpeObservations(history []TrialResult) []TrialResult {
	var obs []TrialResult
	for _, h := range history {
		if len(h.Rungs) == 0 {
			continue
		}
		final := h.Rungs[len(h.Rungs)-1].ValidLoss
		if math.IsInf(final, 0) {
			final = math.NaN() // as a resumed search reads it back from the results file
		}
		obs = append(obs, TrialResult{ID: h.ID, Settings: h.Settings, Rungs: h.Rungs, State: h.State, Final: final})
	}
	return Rank(obs)
}

// points returns the unit-cube points of a group of observations, oldest first.
func (t *TPE) points(group []TrialResult) [][]float64 {
	group = slices.Clone(group)
	slices.SortFunc(group, func(a, b TrialResult) int { return a.ID - b.ID })
	xs := make([][]float64, len(group))
	for i, g := range group {
		xs[i] = t.unit(g.Settings)
	}
	return xs
}

// tpeWeights returns the weights of n observations, oldest first: Optuna's
// default_weights, 1 each for n < 25, else a ramp from 1/n to 1 over the oldest n-25
// and 1 for the newest 25.
func tpeWeights(n int) []float64 {
	w := make([]float64, n)
	ramp := max(n-tpeFlatWeights, 0)
	for i := range w {
		switch {
		case i >= ramp:
			w[i] = 1
		case ramp == 1:
			w[i] = 1 / float64(n)
		default: // numpy's linspace(1/n, 1, ramp)
			w[i] = 1/float64(n) + (1-1/float64(n))*float64(i)/float64(ramp-1)
		}
	}
	return w
}

// unit returns settings as a point of the unit cube: each range's position on its
// scale (an int's cell centre), each list's value index.
func (t *TPE) unit(settings []Setting) []float64 {
	x := make([]float64, len(t.space.Params))
	for i, p := range t.space.Params {
		x[i] = p.unitOf(settings[i].Value)
	}
	return x
}

// unitOf returns a setting's coordinate in the unit cube (see TPE.unit). It panics if
// v is not a setting of p.
func (p Param) unitOf(v any) float64 {
	pos := func(x, hi float64) float64 {
		if p.Log {
			return (math.Log(x) - math.Log(p.Min)) / (math.Log(hi) - math.Log(p.Min))
		}
		return (x - p.Min) / (hi - p.Min)
	}
	switch x := v.(type) {
	case int64:
		if p.Values == nil {
			return (pos(float64(x), p.Max+1) + pos(float64(x)+1, p.Max+1)) / 2
		}
	case float64:
		if p.Values == nil {
			return min(max(pos(x, p.Max), 0), 1)
		}
	}
	if i := slices.Index(p.Values, v); i >= 0 {
		return float64(i)
	}
	panic(fmt.Sprintf("tune: --%s: %v (%T) is not a setting of the search space", p.Flag, v, v))
}

// settingsAt returns the settings at a point of the unit cube.
func (t *TPE) settingsAt(x []float64) []Setting {
	out := make([]Setting, len(t.space.Params))
	for i, p := range t.space.Params {
		var v any
		if p.Values != nil {
			v = p.Values[int(x[i])]
		} else {
			v = p.rangeValue(min(max(x[i], 0), 1))
		}
		out[i] = Setting{Flag: p.Flag, Value: v}
	}
	return out
}
