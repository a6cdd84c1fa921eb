package tune

// Stubs of helper "tunereport"'s functions and types (tune/result.go, report.go,
// plot.go), so that this branch compiles alone. The coordinator deletes this file when
// merging.

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
)

// Setting is one flag's value in a trial: float64, int64, string or bool.
type Setting struct {
	Flag  string
	Value any
}

// RungLoss is a trial's validation loss at a rung.
type RungLoss struct {
	Iteration int
	ValidLoss float64
}

// Point is one training loss of metrics.jsonl.
type Point struct {
	Iteration int
	Loss      float64
}

// TrialResult is what a trial did.
type TrialResult struct {
	ID       int
	Settings []Setting
	Rungs    []RungLoss
	Curve    []Point
	State    string
	Final    float64
	Seconds  float64
	Err      string
}

// Axis is a searched flag and whether its scale is log.
type Axis struct {
	Flag string
	Log  bool
}

// Rank orders trials best first (stub).
func Rank(trials []TrialResult) []TrialResult {
	out := slices.Clone(trials)
	slices.SortStableFunc(out, func(a, b TrialResult) int {
		if a.State == "failed" || b.State == "failed" {
			return boolInt(a.State == "failed") - boolInt(b.State == "failed")
		}
		if len(a.Rungs) != len(b.Rungs) {
			return len(b.Rungs) - len(a.Rungs)
		}
		switch {
		case a.Final < b.Final:
			return -1
		case a.Final > b.Final:
			return 1
		}
		return a.ID - b.ID
	})
	return out
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// WriteTable writes the ranked table (stub).
func WriteTable(w io.Writer, trials []TrialResult, axes []Axis) error {
	for i, t := range Rank(trials) {
		fmt.Fprintf(w, "%d %d %v %v %s %.1f\n", i+1, t.ID, t.Settings, t.Rungs, t.State, t.Seconds)
	}
	return nil
}

// WriteConfig writes the --config JSON (stub).
func WriteConfig(path string, best TrialResult, fixed []Setting) error {
	m := map[string]any{}
	for _, s := range append(slices.Clone(fixed), best.Settings...) {
		m[s.Flag] = s.Value
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// PlotCurves draws the training curves (stub).
func PlotCurves(path string, trials []TrialResult) error {
	return os.WriteFile(path, []byte("stub"), 0o644)
}

// PlotParams draws each setting against the final loss (stub).
func PlotParams(path string, trials []TrialResult, axes []Axis) error {
	return os.WriteFile(path, []byte("stub"), 0o644)
}
