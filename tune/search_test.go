package tune

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// formula is a SegmentRunner whose losses are a formula of the settings and the
// iteration: validation loss (log10(lr)+2.5)² + wd/10 + 2/iteration, training loss
// that plus 1/2. It records the segments it ran.
type formula struct {
	mu    sync.Mutex
	ran   []Segment
	fail  map[int]bool                       // trials whose segments fail
	delay func(Segment) time.Duration        // how long a segment takes (nil: no time)
	hook  func(n int, s Segment) (stop bool) // called with the number of segments begun; true: the segment is interrupted
}

func formulaLoss(s []Setting, it int) float64 {
	return math.Pow(math.Log10(s[0].Value.(float64))+2.5, 2) + s[1].Value.(float64)/10 + 2/float64(it)
}

func (f *formula) RunSegment(ctx context.Context, s Segment) (Outcome, error) {
	f.mu.Lock()
	f.ran = append(f.ran, s)
	n := len(f.ran)
	f.mu.Unlock()
	if f.hook != nil && f.hook(n, s) {
		return Outcome{}, errors.New("interrupted")
	}
	if f.delay != nil {
		time.Sleep(f.delay(s))
	}
	if f.fail[s.Trial] {
		return Outcome{}, fmt.Errorf("trial %d: exit status 1", s.Trial)
	}
	var curve []Point
	for it := s.From + 1; it <= s.To; it++ {
		curve = append(curve, Point{Iteration: it, Loss: formulaLoss(s.Settings, it) + 0.5})
	}
	return Outcome{ValidLoss: formulaLoss(s.Settings, s.To), Curve: curve}, nil
}

// iterations returns the training iterations of the segments f ran.
func (f *formula) iterations() int {
	n := 0
	for _, g := range f.ran {
		n += g.To - g.From
	}
	return n
}

const testSpace = `{"lr": {"min": 1e-4, "max": 1e-1, "scale": "log", "points": 3}, "wd": {"min": 0, "max": 1, "points": 2}}`

// testConfig returns a random search of 9 trials with rungs 2, 4, 8 (η = 2) in dir.
func testConfig(t *testing.T, dir string, r SegmentRunner) Config {
	t.Helper()
	s, err := ParseSpace([]byte(testSpace))
	require.NoError(t, err)
	return Config{Space: s, Sampler: NewRandom(s, 3), Rungs: Rungs(2, 8, 2), Eta: 2, MaxTrials: 9, Dir: dir,
		Runner: r, Record: map[string]any{"seed": 3}, Fixed: []Setting{{"num-layers", int64(2)}}}
}

// decisions returns the records of dir's results file without their times.
func decisions(t *testing.T, dir string) []record {
	t.Helper()
	recs, err := readJournal(filepath.Join(dir, JournalFile))
	require.NoError(t, err)
	for i := range recs {
		recs[i].Seconds = 0
	}
	return recs
}

// withoutTimes returns trials with Seconds zeroed.
func withoutTimes(trials []TrialResult) []TrialResult {
	out := make([]TrialResult, len(trials))
	for i, t := range trials {
		out[i] = t
		out[i].Seconds = 0
	}
	return out
}

// table returns the table of trials with their times zeroed.
func table(t *testing.T, trials []TrialResult) string {
	t.Helper()
	var b strings.Builder
	s, err := ParseSpace([]byte(testSpace))
	require.NoError(t, err)
	require.NoError(t, WriteTable(&b, withoutTimes(trials), s.Axes()))
	return b.String()
}

// TestSearchResumes interrupts a search (--parallel 1) in the middle of its k-th
// segment, for several k, and runs it again: the segments finished before are not run
// again, and the decisions, results and outputs equal an uninterrupted search's.
func TestSearchResumes(t *testing.T) {
	testResumes(t, func(t *testing.T, dir string, r SegmentRunner) Config { return testConfig(t, dir, r) },
		func(segments int) []int { return []int{1, 4, 9, segments} })
}

// TestSearchResumesWithinABudget: as TestSearchResumes, with an iteration budget that
// binds: 22 iterations, of the more that the same 6 trials use without it.
func TestSearchResumesWithinABudget(t *testing.T) {
	free := &formula{}
	cfg := testConfig(t, t.TempDir(), free)
	cfg.MaxTrials = 6
	_, err := Search(context.Background(), cfg)
	require.NoError(t, err)
	used := free.iterations()
	require.Greater(t, used, 22, "the budget binds")
	testResumes(t, func(t *testing.T, dir string, r SegmentRunner) Config {
		cfg := testConfig(t, dir, r)
		cfg.MaxTrials, cfg.MaxIterations = 6, 22
		return cfg
	}, func(segments int) []int { return []int{3, 10, segments} })
}

// testResumes runs the search config gives uninterrupted, then, for each k of cuts
// (given the number of segments of the uninterrupted search), interrupted in the
// middle of its k-th segment and run again; it checks that the resumed search runs
// only the interrupted segment and those after it, and that its decisions, results
// and table equal the uninterrupted search's.
func testResumes(t *testing.T, config func(t *testing.T, dir string, r SegmentRunner) Config, cuts func(segments int) []int) {
	t.Helper()
	whole := t.TempDir()
	ref := &formula{}
	want, err := Search(context.Background(), config(t, whole, ref))
	require.NoError(t, err)
	require.Len(t, want, config(t, whole, ref).MaxTrials)
	wantTable := table(t, want)
	for _, k := range cuts(len(ref.ran)) {
		t.Run(fmt.Sprint("interrupted in segment ", k), func(t *testing.T) {
			dir := t.TempDir()
			ctx, cancel := context.WithCancel(context.Background())
			first := &formula{hook: func(n int, _ Segment) bool {
				if n == k {
					cancel() // as Ctrl-C in the middle of segment k
				}
				return n == k
			}}
			_, err := Search(ctx, config(t, dir, first))
			require.ErrorIs(t, err, context.Canceled)
			cut := len(decisions(t, dir))

			again := &formula{}
			got, err := Search(context.Background(), config(t, dir, again))
			require.NoError(t, err)
			assert.Equal(t, withoutTimes(want), withoutTimes(got))
			assert.Equal(t, decisions(t, whole), decisions(t, dir))
			assert.Equal(t, ref.ran[k-1:], again.ran, "only the interrupted segment and those after it run again")
			assert.Greater(t, cut, 1)
			assert.Equal(t, wantTable, table(t, got))
		})
	}
}

// TestSearchOutcome checks the search's decisions against ones worked out by hand, and
// its outputs.
func TestSearchOutcome(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, dir, &formula{})
	grid, err := NewGrid(cfg.Space)
	require.NoError(t, err)
	cfg.Sampler, cfg.MaxTrials = grid, 0 // lr 1e-4, 3.162e-3, 1e-1 × wd 0, 1
	trials, err := Search(context.Background(), cfg)
	require.NoError(t, err)
	// Rung 0 losses (iteration 2), by trial: (lr, wd) (1e-4, 0) 2.25+1, (1e-4, 1) 2.35+1,
	// (3.162e-3, 0) 0+1, (3.162e-3, 1) 0.1+1, (1e-1, 0) 2.25+1, (1e-1, 1) 2.35+1; rung 1
	// (iteration 4) losses 1/2 lower. With η = 2: trial 1's report makes ⌊2/2⌋ = 1 and
	// promotes trial 0; trial 2's promotes trial 2, twice (rung 1 then has 2 trials);
	// trial 3's (⌊4/2⌋ = 2 at rung 0) promotes trial 3; trials 4 and 5 do not make rung
	// 0's best 2 and 3 (trial 4 ties trial 0, which has the lower id).
	states := []string{"stopped", "stopped", "finished", "stopped", "stopped", "stopped"}
	reached := []int{2, 1, 3, 2, 1, 1}
	for i, tr := range trials {
		assert.Equal(t, states[i], tr.State, "trial %d", i)
		assert.Len(t, tr.Rungs, reached[i], "trial %d", i)
		assert.Len(t, tr.Curve, tr.Rungs[len(tr.Rungs)-1].Iteration, "trial %d: a point per iteration", i)
	}
	assert.InDelta(t, 0.25, trials[2].Final, 1e-3, "2/8 at lr ≈ 10^-2.5 and wd 0")
	for _, f := range []string{JournalFile, TableFile, BestFile, CurvesFile, ParamsFile} {
		assert.FileExists(t, filepath.Join(dir, f))
	}
}

// TestSearchNoEarlyStopping: with one rung every grid point runs to the end, once.
func TestSearchNoEarlyStopping(t *testing.T) {
	r := &formula{}
	cfg := testConfig(t, t.TempDir(), r)
	cfg.Sampler, _ = NewGrid(cfg.Space)
	cfg.Rungs, cfg.Eta, cfg.MaxTrials = Rungs(8, 8, 2), 2, 0
	trials, err := Search(context.Background(), cfg)
	require.NoError(t, err)
	require.Len(t, trials, 6)
	require.Len(t, r.ran, 6)
	for _, tr := range trials {
		assert.Equal(t, "finished", tr.State)
		assert.Equal(t, []RungLoss{{8, formulaLoss(tr.Settings, 8)}}, tr.Rungs)
	}
}

// TestSearchParallel runs 3 segments at once, in an order set by random delays,
// interrupts it and runs it again: every recorded decision is kept, each segment has
// one result, and every trial that is not stopped reaches the last rung.
func TestSearchParallel(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, dir, nil)
	cfg.Parallel = 3
	before, delay := runInterrupted(t, cfg, 7)

	cfg.Runner = &formula{delay: delay}
	trials, err := Search(context.Background(), cfg)
	require.NoError(t, err)
	after := decisions(t, dir)
	require.Equal(t, before, after[:len(before)], "the recorded decisions stay")
	results := map[[2]int]int{}
	for _, r := range after {
		if r.Event == eventRung || r.Event == eventFailed {
			results[[2]int{r.ID, r.Rung}]++
		}
	}
	for seg, n := range results {
		assert.Equal(t, 1, n, "trial %d rung %d: one result", seg[0], seg[1])
	}
	finished := 0
	for _, tr := range trials {
		assert.Contains(t, []string{"finished", "stopped"}, tr.State)
		if tr.State == "finished" {
			finished++
		}
	}
	assert.Len(t, trials, 9)
	assert.GreaterOrEqual(t, finished, 1)
}

// runInterrupted runs cfg's search with a formula runner whose segments take 0 to 2
// ms, drawn from a seeded stream, interrupting it in its segment at (that segment and
// any begun after it fail): it returns the decisions recorded and the delays, which
// go on from there for the search run again.
func runInterrupted(t *testing.T, cfg Config, at int) ([]record, func(Segment) time.Duration) {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	var mu sync.Mutex
	delay := func(Segment) time.Duration {
		mu.Lock()
		defer mu.Unlock()
		return time.Duration(rng.IntN(3)) * time.Millisecond
	}
	ctx, cancel := context.WithCancel(context.Background())
	cfg.Runner = &formula{delay: delay, hook: func(n int, _ Segment) bool {
		if n == at {
			cancel()
		}
		return n >= at
	}}
	_, err := Search(ctx, cfg)
	require.ErrorIs(t, err, context.Canceled)
	return decisions(t, cfg.Dir), delay
}

func TestSearchFailedTrial(t *testing.T) {
	cfg := testConfig(t, t.TempDir(), &formula{fail: map[int]bool{1: true}})
	trials, err := Search(context.Background(), cfg)
	require.NoError(t, err)
	assert.Equal(t, "failed", trials[1].State)
	assert.Contains(t, trials[1].Err, "trial 1: exit status 1")
	assert.NotEqual(t, 1, Rank(trials)[0].ID)
}

func TestSearchBudgets(t *testing.T) {
	t.Run("random needs a budget", func(t *testing.T) {
		cfg := testConfig(t, t.TempDir(), &formula{})
		cfg.MaxTrials = 0
		_, err := Search(context.Background(), cfg)
		assert.ErrorContains(t, err, "random sampling needs a budget")
	})
	t.Run("max trials", func(t *testing.T) {
		cfg := testConfig(t, t.TempDir(), &formula{})
		cfg.MaxTrials = 3
		trials, err := Search(context.Background(), cfg)
		require.NoError(t, err)
		assert.Len(t, trials, 3)
		assert.Equal(t, "finished", Rank(trials)[0].State, "the best of the 3 is brought to the last rung")
	})
	t.Run("max total iterations", func(t *testing.T) {
		// Rungs 2, 4, 8: a new trial costs 2 iterations, a promotion 2 or 4. Random
		// sampling with only the iteration budget: trials start while 2 more fit.
		for _, budget := range []int{2, 7, 30} {
			r := &formula{}
			cfg := testConfig(t, t.TempDir(), r)
			cfg.MaxTrials, cfg.MaxIterations = 0, budget
			_, err := Search(context.Background(), cfg)
			require.NoError(t, err)
			used := r.iterations()
			assert.LessOrEqual(t, used, budget, "budget %d", budget)
			assert.Greater(t, used, budget-2, "budget %d: a new trial would still have fit", budget)
		}
	})
	t.Run("a budget that does not bind changes nothing", func(t *testing.T) {
		whole, wide := t.TempDir(), t.TempDir()
		r := &formula{}
		_, err := Search(context.Background(), testConfig(t, whole, r))
		require.NoError(t, err)
		used := r.iterations()
		cfg := testConfig(t, wide, &formula{})
		cfg.MaxIterations = used
		_, err = Search(context.Background(), cfg)
		require.NoError(t, err)
		assert.Equal(t, decisions(t, whole), decisions(t, wide))
	})
	t.Run("max time", func(t *testing.T) {
		r := &formula{delay: func(Segment) time.Duration { return 30 * time.Millisecond }}
		cfg := testConfig(t, t.TempDir(), r)
		cfg.MaxTime, cfg.Parallel = 10*time.Millisecond, 2
		trials, err := Search(context.Background(), cfg)
		require.NoError(t, err)
		assert.Len(t, r.ran, 2, "the first two segments start, finish, and nothing starts after the time")
		assert.Len(t, trials, 2)
	})
}

func TestSearchRefusesAnotherSearchsFile(t *testing.T) {
	dir := t.TempDir()
	cfg := testConfig(t, dir, &formula{})
	cfg.MaxTrials = 1
	_, err := Search(context.Background(), cfg)
	require.NoError(t, err)
	cfg.Record = map[string]any{"seed": 4}
	_, err = Search(context.Background(), cfg)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "settings differ: seed was 3, now 4")
}

// TestJournalDropsACutRecord: a record a crash cut short is dropped; the search resumes.
func TestJournalDropsACutRecord(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	first := &formula{hook: func(n int, _ Segment) bool {
		if n == 3 {
			cancel()
		}
		return n == 3
	}}
	_, err := Search(ctx, testConfig(t, dir, first))
	require.ErrorIs(t, err, context.Canceled)
	f, err := os.OpenFile(filepath.Join(dir, JournalFile), os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString(`{"event":"rung","id":2,"ru`)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	_, err = Search(context.Background(), testConfig(t, dir, &formula{}))
	require.NoError(t, err)
}
