package tune

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"megago/internal/atomicfile"
)

// Config is a search's settings.
type Config struct {
	Space   *Space
	Sampler Sampler
	// Rungs are the iterations at which trials are compared (Rungs), increasing; the
	// last is every trial's --train-iters.
	Rungs []int
	// Eta is the reduction factor η: of the trials that reach a rung, the best 1/η go
	// on (η ≤ 1: all go on; one rung: no early stopping).
	Eta float64
	// MaxTrials bounds the trials started (0: the sampler's size; a random sampler
	// then needs MaxTime). Once reached, no new trial starts; the search still
	// promotes the trials it has.
	MaxTrials int
	// MaxTime bounds the wall time of this run of Search (0: none): after it no new
	// segment starts, and the running ones finish.
	MaxTime time.Duration
	// MaxIterations bounds the training iterations of all trials together (0: none),
	// as a grid's compute is counted: a segment (a new trial's first, a promotion) is
	// decided only if it fits with every segment decided before it, run or not, failed
	// or not. When the best trial's way to the last rung does not fit, the search ends
	// with its best below the last rung.
	MaxIterations int
	// Parallel is the number of segments that run at once (0: 1).
	Parallel int
	// Dir is the output directory: tune.jsonl (the results file), table.txt,
	// best.json, curves.png and params.png.
	Dir    string
	Runner SegmentRunner
	// Fixed are the example's fixed settings, written to best.json before the best
	// trial's (with --train-iters, the last rung).
	Fixed []Setting
	// Record is what the results file records of the search's settings (a value
	// encoding/json encodes to an object): a restart must give the same.
	Record any
	// Log gets one line per event (nil: none).
	Log io.Writer
}

// Output file names in Config.Dir.
const (
	JournalFile = "tune.jsonl"
	TableFile   = "table.txt"
	BestFile    = "best.json"
	CurvesFile  = "curves.png"
	ParamsFile  = "params.png"
)

// Search runs the search cfg describes and returns every trial's result, by id. It
// records each decision (a new trial with its settings, a promotion) and each result (a
// rung's validation loss, a failure) in Dir/tune.jsonl as it happens. Given a results
// file from an earlier run of the same search, it replays it: decided segments that did
// not finish run first (from their last rung's checkpoint), then the search goes on
// deciding as an uninterrupted one would: with Parallel 1 its decisions are exactly
// those of a search never stopped.
//
// When ctx ends, the running segments are stopped, nothing more is recorded, and Search
// returns ctx's error; run it again to continue. At the end it writes the table, the
// best trial's config and the plots. A failed trial is recorded and does not stop the
// search.
func Search(ctx context.Context, cfg Config) ([]TrialResult, error) {
	s, err := newSearch(cfg)
	if err != nil {
		return nil, err
	}
	defer s.j.close()
	if err := s.loop(ctx); err != nil {
		return s.results(), err
	}
	if err := s.finish(); err != nil {
		return s.results(), err
	}
	trials := s.results()
	return trials, writeOutputs(cfg, trials)
}

// search is the state of a run of Search.
type search struct {
	cfg     Config
	asha    *ASHA
	j       *journal
	trials  []*TrialResult // by id
	pending []Segment      // decided, not finished: run first, in order
	iters   int            // training iterations of every segment decided
	stopped map[int]int    // trials recorded as stopped, at their rung count
	running map[int]bool
	done    chan segmentDone
	start   time.Time
	log     io.Writer
}

// segmentDone is a finished segment.
type segmentDone struct {
	seg     Segment
	out     Outcome
	err     error
	seconds float64
}

// newSearch checks cfg, opens the results file and replays it.
func newSearch(cfg Config) (*search, error) {
	switch {
	case cfg.Space == nil || cfg.Sampler == nil || cfg.Runner == nil || len(cfg.Rungs) == 0:
		panic("tune: Search: Config needs a Space, a Sampler, a Runner and Rungs")
	case cfg.MaxIterations < 0:
		panic(fmt.Sprintf("tune: Search: MaxIterations %d", cfg.MaxIterations))
	case cfg.MaxTrials == 0 && cfg.Sampler.Size() == 0 && cfg.MaxTime == 0 && cfg.MaxIterations == 0:
		return nil, errors.New("random sampling needs a budget: a maximum number of trials, of iterations or a maximum time")
	}
	cfg.Parallel = max(cfg.Parallel, 1)
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, err
	}
	j, past, err := openJournal(filepath.Join(cfg.Dir, JournalFile), cfg.Record)
	if err != nil {
		return nil, err
	}
	s := &search{cfg: cfg, asha: NewASHA(len(cfg.Rungs), cfg.Eta), j: j, stopped: map[int]int{},
		running: map[int]bool{}, done: make(chan segmentDone), start: time.Now(), log: cmp.Or[io.Writer](cfg.Log, io.Discard)}
	if err := s.replay(past); err != nil {
		j.close()
		return nil, fmt.Errorf("%s: %w", JournalFile, err)
	}
	return s, nil
}

// replay rebuilds the state the records of an earlier run describe.
func (s *search) replay(past []record) (err error) {
	n := 0
	defer func() { // ASHA panics on records out of order: a file not written by Search
		if p := recover(); p != nil {
			err = fmt.Errorf("record %d: %v", n+2, p)
		}
	}()
	for i, r := range past {
		n = i
		if r.Event != eventTrial && (r.ID < 0 || r.ID >= len(s.trials)) {
			return fmt.Errorf("record %d: unknown trial %d", i+2, r.ID)
		}
		switch r.Event {
		case eventTrial:
			if r.ID != len(s.trials) {
				return fmt.Errorf("record %d: trial %d out of order", i+2, r.ID)
			}
			settings, err := decodeSettings(s.cfg.Space, r.Settings)
			if err != nil {
				return fmt.Errorf("record %d: %w", i+2, err)
			}
			s.newTrial(settings)
		case eventPromote:
			s.promoted(r.ID)
		case eventRung:
			s.reached(r.ID, r.Rung, lossOf(r.ValidLoss), curveOf(r.Curve), r.Seconds)
		case eventFailed:
			s.failed(r.ID, r.Error)
		case eventStopped:
			s.stopped[r.ID] = r.Rung
		}
	}
	return nil
}

// newTrial adds a trial with settings and its first segment to pending.
func (s *search) newTrial(settings []Setting) {
	id := len(s.trials)
	s.trials = append(s.trials, &TrialResult{ID: id, Settings: settings, Final: math.NaN()}) // its State: results
	s.asha.Start(id)
	s.decided(s.segment(id))
}

// promoted applies the promotion of trial id: its next segment is decided.
func (s *search) promoted(id int) Segment {
	s.asha.Promote(id)
	seg := s.segment(id)
	s.decided(seg)
	return seg
}

// decided adds seg, just decided, to pending and its iterations to those decided.
func (s *search) decided(seg Segment) {
	s.pending = append(s.pending, seg)
	s.iters += seg.To - seg.From
}

// rungFrom returns the iteration a segment towards rung k starts from.
func (s *search) rungFrom(k int) int {
	if k == 0 {
		return 0
	}
	return s.cfg.Rungs[k-1]
}

// fits reports whether a segment towards rung k fits in what MaxIterations leaves.
func (s *search) fits(k int) bool {
	return s.cfg.MaxIterations == 0 || s.iters+s.cfg.Rungs[k]-s.rungFrom(k) <= s.cfg.MaxIterations
}

// segment returns trial id's next segment.
func (s *search) segment(id int) Segment {
	k := s.asha.Reached(id)
	return Segment{Trial: id, Settings: s.trials[id].Settings, Rung: k, From: s.rungFrom(k), To: s.cfg.Rungs[k], MaxIters: s.cfg.Rungs[len(s.cfg.Rungs)-1]}
}

// reached records that trial id reached rung k.
func (s *search) reached(id, k int, loss float64, curve []Point, seconds float64) {
	s.asha.Report(id, k, loss)
	t := s.trials[id]
	t.Rungs = append(t.Rungs, RungLoss{Iteration: s.cfg.Rungs[k], ValidLoss: loss})
	t.Curve = append(t.Curve, curve...)
	t.Final, t.Seconds = loss, t.Seconds+seconds
	s.unpend(id)
}

// failed records that trial id failed.
func (s *search) failed(id int, why string) {
	s.asha.Fail(id)
	s.trials[id].State, s.trials[id].Err = StateFailed, why
	s.unpend(id)
}

// unpend removes trial id's segment from pending.
func (s *search) unpend(id int) {
	s.pending = slices.DeleteFunc(s.pending, func(g Segment) bool { return g.Trial == id })
}

// loop launches segments while there is work and room, and records their results.
func (s *search) loop(ctx context.Context) error {
	for {
		for len(s.running) < s.cfg.Parallel && ctx.Err() == nil {
			seg, ok, err := s.decide()
			if err != nil {
				s.wait()
				return err
			}
			if !ok {
				break
			}
			s.launch(ctx, seg)
		}
		if len(s.running) == 0 {
			return ctx.Err()
		}
		if err := s.record(ctx, <-s.done); err != nil {
			s.wait()
			return err
		}
	}
}

// decide returns the next segment to run: a decided one not run yet, a promotion
// (ASHA), a new trial while the budget lasts, or, when nothing else runs, the
// promotion that brings the best trial to the last rung. Every decision is recorded
// before it is returned.
func (s *search) decide() (Segment, bool, error) {
	if s.cfg.MaxTime > 0 && time.Since(s.start) >= s.cfg.MaxTime {
		return Segment{}, false, nil
	}
	if i := slices.IndexFunc(s.pending, func(g Segment) bool { return !s.running[g.Trial] }); i >= 0 {
		return s.pending[i], true, nil
	}
	if id, ok := s.asha.Next(); ok && s.fits(s.asha.Reached(id)) {
		return s.promote(id)
	}
	limit := cmp.Or(s.cfg.MaxTrials, s.cfg.Sampler.Size())
	if (limit == 0 || len(s.trials) < limit) && s.fits(0) {
		if settings, ok := s.cfg.Sampler.Settings(len(s.trials), s.results()); ok {
			id := len(s.trials)
			if err := s.j.append(record{Event: eventTrial, ID: id, Settings: encodeSettings(settings)}); err != nil {
				return Segment{}, false, err
			}
			s.newTrial(settings)
			fmt.Fprintf(s.log, "trial %d: %s\n", id, argsText(settings))
			return s.segment(id), true, nil
		}
	}
	if len(s.running) == 0 {
		if id, ok := s.asha.Drain(); ok && s.fits(s.asha.Reached(id)) {
			return s.promote(id)
		}
	}
	return Segment{}, false, nil
}

// promote records and applies the promotion of trial id.
func (s *search) promote(id int) (Segment, bool, error) {
	k := s.asha.Reached(id)
	if err := s.j.append(record{Event: eventPromote, ID: id, Rung: k}); err != nil {
		return Segment{}, false, err
	}
	seg := s.promoted(id)
	fmt.Fprintf(s.log, "trial %d: promoted to rung %d (iteration %d)\n", id, k, seg.To)
	return seg, true, nil
}

// launch runs seg in a goroutine that reports on s.done.
func (s *search) launch(ctx context.Context, seg Segment) {
	s.running[seg.Trial] = true
	go func() {
		t0 := time.Now()
		out, err := s.cfg.Runner.RunSegment(ctx, seg)
		s.done <- segmentDone{seg: seg, out: out, err: err, seconds: time.Since(t0).Seconds()}
	}()
}

// wait waits for the running segments after an error, discarding their results.
func (s *search) wait() {
	for len(s.running) > 0 {
		d := <-s.done
		delete(s.running, d.seg.Trial)
	}
}

// record records a finished segment. A segment stopped by ctx is not recorded: it
// runs again when the search does.
func (s *search) record(ctx context.Context, d segmentDone) error {
	delete(s.running, d.seg.Trial)
	id, k := d.seg.Trial, d.seg.Rung
	switch {
	case d.err != nil && ctx.Err() != nil:
		return nil
	case d.err != nil:
		if err := s.j.append(record{Event: eventFailed, ID: id, Rung: k, Error: d.err.Error()}); err != nil {
			return err
		}
		s.failed(id, d.err.Error())
		fmt.Fprintf(s.log, "trial %d: failed: %v\n", id, d.err)
		return nil
	}
	r := record{Event: eventRung, ID: id, Rung: k, Iteration: d.seg.To, ValidLoss: finite(d.out.ValidLoss),
		Seconds: d.seconds, Curve: curveRecord(d.out.Curve)}
	if err := s.j.append(r); err != nil {
		return err
	}
	s.reached(id, k, d.out.ValidLoss, d.out.Curve, d.seconds)
	fmt.Fprintf(s.log, "trial %d: rung %d (iteration %d): validation loss %.4f (%.1f s)\n", id, k, d.seg.To, d.out.ValidLoss, d.seconds)
	if k == len(s.cfg.Rungs)-1 {
		if err := s.j.append(record{Event: eventFinished, ID: id, Rung: k}); err != nil {
			return err
		}
	}
	return writeTable(s.cfg, s.results())
}

// finish records which trials stopped below the last rung.
func (s *search) finish() error {
	for _, t := range s.trials {
		k := s.asha.Reached(t.ID)
		prev, recorded := s.stopped[t.ID]
		if t.State == StateFailed || k == len(s.cfg.Rungs) || recorded && prev == k || s.isPending(t.ID) {
			continue // a pending segment (left by --max-time) runs when the search is run again
		}
		if err := s.j.append(record{Event: eventStopped, ID: t.ID, Rung: k}); err != nil {
			return err
		}
		s.stopped[t.ID] = k
	}
	return nil
}

// results returns every trial's result, with its state now.
func (s *search) results() []TrialResult {
	out := make([]TrialResult, len(s.trials))
	for i, t := range s.trials {
		out[i] = *t
		switch k := s.asha.Reached(t.ID); {
		case t.State == StateFailed:
		case k == len(s.cfg.Rungs):
			out[i].State = StateFinished
		case s.running[t.ID] || s.isPending(t.ID):
			out[i].State = StateRunning
		default:
			out[i].State = StateStopped
		}
	}
	return out
}

// isPending reports whether trial id has a segment decided and not finished.
func (s *search) isPending(id int) bool {
	return slices.ContainsFunc(s.pending, func(g Segment) bool { return g.Trial == id })
}

// writeTable writes cfg.Dir's table.txt.
func writeTable(cfg Config, trials []TrialResult) error {
	return atomicfile.Write(filepath.Join(cfg.Dir, TableFile), func(w io.Writer) error {
		return WriteTable(w, trials, cfg.Space.Axes())
	})
}

// writeOutputs writes table.txt, best.json (when a trial has a result) and the plots.
func writeOutputs(cfg Config, trials []TrialResult) error {
	if err := writeTable(cfg, trials); err != nil {
		return err
	}
	if ranked := Rank(trials); len(ranked) > 0 && len(ranked[0].Rungs) > 0 {
		fixed := append(slices.Clone(cfg.Fixed), Setting{Flag: "train-iters", Value: int64(cfg.Rungs[len(cfg.Rungs)-1])})
		if err := WriteConfig(filepath.Join(cfg.Dir, BestFile), ranked[0], fixed); err != nil {
			return err
		}
	}
	if err := PlotCurves(filepath.Join(cfg.Dir, CurvesFile), trials); err != nil {
		return err
	}
	return PlotParams(filepath.Join(cfg.Dir, ParamsFile), trials, cfg.Space.Axes())
}

// curveRecord and curveOf convert a training curve to and from the results file,
// leaving out losses that are not finite.
func curveRecord(c []Point) [][2]float64 {
	var out [][2]float64
	for _, p := range c {
		if finite(p.Loss) != nil {
			out = append(out, [2]float64{float64(p.Iteration), p.Loss})
		}
	}
	return out
}

// curveOf returns a recorded training curve.
func curveOf(c [][2]float64) []Point {
	out := make([]Point, len(c))
	for i, p := range c {
		out[i] = Point{Iteration: int(p[0]), Loss: p[1]}
	}
	return out
}

// argsText returns settings as command-line flags, for the log.
func argsText(settings []Setting) string {
	return strings.Join(Args(settings), " ")
}
