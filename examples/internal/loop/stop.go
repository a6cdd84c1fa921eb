package loop

import (
	"context"
	"fmt"
	"time"

	"megago/examples/internal/ranks"
)

// stop says why the loop stops after an iteration, if it does.
type stop struct {
	signal bool   // ctx ended on some rank: Ctrl-C or SIGTERM
	exit   string // a planned exit: "--exit-interval 5", "--exit-duration-in-mins 30"
}

// stopAfter decides, on every rank alike, whether the run stops after iteration it
// (1-based): when ctx has ended on any rank (one MAX all-reduce under work, which
// also carries whether any rank's clock has passed --exit-duration-in-mins since
// start), or when it is a multiple of --exit-interval. planned is false before the
// first iteration of a run, where only ctx counts.
func (l *Loop) stopAfter(ctx, work context.Context, it int, start time.Time, planned bool) (stop, error) {
	cfg := l.Settings
	late := planned && cfg.ExitDurationInMins > 0 && time.Since(start).Minutes() >= cfg.ExitDurationInMins
	set, err := ranks.AnyRank(work, l.Mesh.World(), l.Dev, ctx.Err() != nil, late)
	if err != nil {
		return stop{}, err
	}
	s := stop{signal: set[0]}
	switch {
	case planned && cfg.ExitInterval > 0 && it%cfg.ExitInterval == 0:
		s.exit = fmt.Sprintf("--exit-interval %d", cfg.ExitInterval)
	case set[1]:
		s.exit = fmt.Sprintf("--exit-duration-in-mins %g", cfg.ExitDurationInMins)
	}
	return s, nil
}

// announce records in res that the run stops after iteration it, for s, says so on
// the report, and returns whether to save that iteration: on a planned exit, and on a
// signal with --exit-signal-handler.
func (l *Loop) announce(it int, s stop, res *Result) (save bool) {
	switch {
	case s.signal:
		res.Interrupted = true
		l.Report.Printf("interrupted: stopping after iteration %d on every rank\n", it)
		return l.Settings.ExitSignalHandler || s.exit != ""
	case s.exit != "":
		res.Exited = true
		l.Report.Printf("exiting after iteration %d (%s)\n", it, s.exit)
		return true
	}
	return false
}
