package tune

import (
	"cmp"
	"fmt"
	"math"
	"slices"
)

// Rungs returns the iterations at which trials are compared: minIters·η^k for k = 0,
// 1, ... while below maxIters, then maxIters. With η ≤ 1 or minIters ≥ maxIters there
// is one rung, maxIters: no early stopping. It panics if maxIters < 1.
func Rungs(minIters, maxIters int, eta float64) []int {
	if maxIters < 1 {
		panic(fmt.Sprintf("tune: Rungs: max iterations %d < 1", maxIters))
	}
	var rungs []int
	if eta > 1 && minIters >= 1 {
		for r := float64(minIters); int(math.Round(r)) < maxIters; r *= eta {
			if k := int(math.Round(r)); len(rungs) == 0 || k > rungs[len(rungs)-1] {
				rungs = append(rungs, k)
			}
		}
	}
	return append(rungs, maxIters)
}

// ASHA decides which trial to continue, by asynchronous successive halving (Li et al.,
// "A System for Massively Parallel Hyperparameter Tuning", 2020): a trial that has
// reached rung k is promoted to rung k+1 when its loss there is among the best
// ⌊n_k/η⌋ of the n_k trials that have reached rung k. It is a pure state machine: the
// caller tells it what happened (Start, Promote, Report, Fail) and asks what to do
// next (Next, Drain); the same calls in the same order give the same decisions.
//
// Trial ids are the caller's. Losses that are not finite (a diverged trial) rank last
// and are never promoted.
type ASHA struct {
	rungs  int     // number of rungs
	eta    float64 // reduction factor η
	trials map[int]*ashaTrial
}

// ashaTrial is one trial's progress.
type ashaTrial struct {
	losses  []float64 // validation loss at each rung reached, in order
	running bool      // a segment towards rung len(losses) is under way
	failed  bool
}

// NewASHA returns the state of a search with the given number of rungs and reduction
// factor η (η ≤ 1: nothing is ever promoted by Next; Drain still completes the best).
// It panics if rungs < 1.
func NewASHA(rungs int, eta float64) *ASHA {
	if rungs < 1 {
		panic(fmt.Sprintf("tune: NewASHA: %d rungs", rungs))
	}
	return &ASHA{rungs: rungs, eta: eta, trials: map[int]*ashaTrial{}}
}

// Start records that trial id began its first segment, towards rung 0. It panics if id
// was started before.
func (a *ASHA) Start(id int) {
	if a.trials[id] != nil {
		panic(fmt.Sprintf("tune: ASHA.Start: trial %d started twice", id))
	}
	a.trials[id] = &ashaTrial{running: true}
}

// Promote records that trial id began its segment towards its next rung. It panics if
// id is not idle below the last rung.
func (a *ASHA) Promote(id int) {
	t := a.trials[id]
	if t == nil || t.running || t.failed || len(t.losses) == 0 || len(t.losses) >= a.rungs {
		panic(fmt.Sprintf("tune: ASHA.Promote: trial %d cannot be promoted", id))
	}
	t.running = true
}

// Report records that trial id reached rung k (0-based) with validation loss loss. It
// panics if id was not running towards rung k.
func (a *ASHA) Report(id, k int, loss float64) {
	t := a.trials[id]
	if t == nil || !t.running || len(t.losses) != k {
		panic(fmt.Sprintf("tune: ASHA.Report: trial %d was not running towards rung %d", id, k))
	}
	t.losses, t.running = append(t.losses, loss), false
}

// Fail records that trial id's running segment failed; the trial is out. It panics if
// id was not running.
func (a *ASHA) Fail(id int) {
	t := a.trials[id]
	if t == nil || !t.running {
		panic(fmt.Sprintf("tune: ASHA.Fail: trial %d was not running", id))
	}
	t.running, t.failed = false, true
}

// Reached returns the number of rungs trial id has reached.
func (a *ASHA) Reached(id int) int {
	if t := a.trials[id]; t != nil {
		return len(t.losses)
	}
	return 0
}

// Next returns a trial to promote, the deepest rung first: at rung k, the best idle
// trial among the best ⌊n_k/η⌋ that reached it. ok is false when none qualifies (the
// caller then starts a new trial, or waits).
func (a *ASHA) Next() (id int, ok bool) {
	for k := a.rungs - 2; k >= 0; k-- {
		ranked := a.ranked(k)
		quota := int(math.Floor(float64(len(ranked)) / a.eta))
		if a.eta <= 1 {
			quota = 0
		}
		for _, id := range ranked[:min(quota, len(ranked))] {
			if a.promotable(id, k) {
				return id, true
			}
		}
	}
	return 0, false
}

// Drain returns a trial to promote when the search can start nothing else and nothing
// runs, so that the best trial reaches the last rung: the best idle trial of the
// deepest rung below the last that has one, unless some trial reached the last rung.
// ok is false when there is nothing to do.
func (a *ASHA) Drain() (id int, ok bool) {
	for k := a.rungs - 1; k >= 0; k-- {
		ranked := a.ranked(k)
		if k == a.rungs-1 {
			if len(ranked) > 0 {
				return 0, false
			}
			continue
		}
		for _, id := range ranked {
			if a.promotable(id, k) {
				return id, true
			}
		}
	}
	return 0, false
}

// promotable reports whether trial id is idle at rung k with a finite loss.
func (a *ASHA) promotable(id, k int) bool {
	t := a.trials[id]
	return !t.running && !t.failed && len(t.losses) == k+1 && !math.IsNaN(t.losses[k]) && !math.IsInf(t.losses[k], 0)
}

// ranked returns the trials that reached rung k, best loss first (not finite last,
// ties by id).
func (a *ASHA) ranked(k int) []int {
	var ids []int
	for id, t := range a.trials {
		if len(t.losses) > k {
			ids = append(ids, id)
		}
	}
	key := func(id int) float64 {
		x := a.trials[id].losses[k]
		if math.IsNaN(x) {
			return math.Inf(1)
		}
		return x
	}
	slices.SortFunc(ids, func(i, j int) int {
		if c := cmp.Compare(key(i), key(j)); c != 0 {
			return c
		}
		return i - j
	})
	return ids
}
