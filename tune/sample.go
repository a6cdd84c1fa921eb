package tune

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
)

// A Sampler gives each trial its settings. Trial id's settings depend only on the
// sampler, id and history: the results of the trials before id as the search knows
// them when it starts trial id (by id; each with the rungs it reached so far). Random
// and Grid ignore history; TPE learns from it. A search records every trial's settings
// when it starts the trial and replays them on resume, never asking again; with
// Parallel 1 the history at each new trial is the same in an interrupted and resumed
// search as in an uninterrupted one, so it draws what an uninterrupted one would.
type Sampler interface {
	// Settings returns trial id's settings (id ≥ 0) in the space's flag order, and
	// false when there is no trial id (a grid has fewer points). history holds trials
	// 0 to id-1; a sampler must not modify it.
	Settings(id int, history []TrialResult) ([]Setting, bool)
	// Size returns how many trials the sampler has: a grid's points, or 0 for
	// unlimited.
	Size() int
}

// NewSampler returns the sampler called name ("random", "grid" or "tpe", whose first
// startup trials are random: see NewTPE) over s.
func NewSampler(name string, s *Space, seed uint64, startup int) (Sampler, error) {
	switch name {
	case "random":
		return NewRandom(s, seed), nil
	case "grid":
		return NewGrid(s)
	case "tpe":
		return NewTPE(s, seed, startup), nil
	}
	return nil, fmt.Errorf("unknown sampler %q (random, grid or tpe)", name)
}

// Random draws each setting independently: uniformly on a range's scale (log or
// linear), uniformly from a list. Trial id's draws come from a PCG stream keyed by
// (seed, id). Float settings are rounded to 4 significant digits, so that tables and
// configs read well.
type Random struct {
	space *Space
	seed  uint64
}

// NewRandom returns a random sampler over s with the given seed.
func NewRandom(s *Space, seed uint64) *Random { return &Random{space: s, seed: seed} }

// Size returns 0: a random sampler has no end.
func (r *Random) Size() int { return 0 }

// Settings returns trial id's draws; history is not used.
func (r *Random) Settings(id int, _ []TrialResult) ([]Setting, bool) {
	rng := rand.New(rand.NewPCG(r.seed, uint64(id)))
	out := make([]Setting, len(r.space.Params))
	for i, p := range r.space.Params {
		var v any
		if p.Values != nil {
			v = p.Values[rng.IntN(len(p.Values))]
		} else {
			v = p.rangeValue(rng.Float64())
		}
		out[i] = Setting{Flag: p.Flag, Value: v}
	}
	return out, true
}

// rangeValue returns the setting of a range at the fraction u ∈ [0, 1) of its scale:
// an int range's integers are equally wide there (the scale runs from min to max+1,
// floored), a float is rounded to 4 significant digits.
func (p Param) rangeValue(u float64) any {
	if p.Int {
		hi := p.Max + 1 // draw over [min, max+1) and floor: every integer equally wide on the scale
		x := math.Floor(p.at(u, p.Min, hi))
		return int64(min(max(x, p.Min), p.Max))
	}
	return round4(p.at(u, p.Min, p.Max))
}

// at returns the point a fraction u ∈ [0, 1] of the way from lo to hi on p's scale.
func (p Param) at(u, lo, hi float64) float64 {
	if p.Log {
		return math.Exp(math.Log(lo) + u*(math.Log(hi)-math.Log(lo)))
	}
	return lo + u*(hi-lo)
}

// round4 rounds x to 4 significant digits.
func round4(x float64) float64 {
	r, err := strconv.ParseFloat(strconv.FormatFloat(x, 'g', 4, 64), 64)
	if err != nil {
		panic(err) // FormatFloat writes what ParseFloat reads
	}
	return r
}

// Grid enumerates every combination of its flags' points: a range's Points values
// evenly spaced on its scale from min to max (integers rounded, repeats dropped; floats
// to 4 significant digits), a list's values. Trial 0 is every flag's first point; the
// last flag of the space changes fastest.
type Grid struct {
	flags  []string
	points [][]any // [flag][point]
}

// NewGrid returns the grid over s. It returns an error naming every range without
// "points".
func NewGrid(s *Space) (*Grid, error) {
	g := &Grid{}
	var missing []string
	for _, p := range s.Params {
		g.flags = append(g.flags, p.Flag)
		if p.Values != nil {
			g.points = append(g.points, p.Values)
			continue
		}
		if p.Points == 0 {
			missing = append(missing, fmt.Sprintf("--%s: grid sampling needs \"points\" for a range", p.Flag))
		}
		g.points = append(g.points, p.gridPoints())
	}
	if err := problemsError(missing); err != nil {
		return nil, fmt.Errorf("search space: %w", err)
	}
	return g, nil
}

// gridPoints returns a range's grid values.
func (p Param) gridPoints() []any {
	var pts []any
	for i := range p.Points {
		x := p.at(float64(i)/float64(p.Points-1), p.Min, p.Max)
		var v any = round4(x)
		if p.Int {
			v = int64(math.Round(x))
		}
		if len(pts) == 0 || pts[len(pts)-1] != v {
			pts = append(pts, v)
		}
	}
	return pts
}

// Size returns the number of grid points.
func (g *Grid) Size() int {
	n := 1
	for _, pts := range g.points {
		n *= len(pts)
	}
	return n
}

// Settings returns grid point id; history is not used.
func (g *Grid) Settings(id int, _ []TrialResult) ([]Setting, bool) {
	if id < 0 || id >= g.Size() {
		return nil, false
	}
	out := make([]Setting, len(g.flags))
	for i := len(g.flags) - 1; i >= 0; i-- {
		n := len(g.points[i])
		out[i] = Setting{Flag: g.flags[i], Value: g.points[i][id%n]}
		id /= n
	}
	return out, true
}
