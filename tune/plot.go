package tune

import (
	"fmt"
	"image/color"
	"math"
	"slices"

	"megago/internal/plot"
)

// The plots' sizes in pixels: PlotCurves' chart, and each panel of PlotParams.
const (
	curvesW, curvesH = 900, 520
	panelW, panelH   = 420, 300
	panelCols        = 3
)

// Colours of the trials: the best in red, the next ones in the palette's other colours,
// the rest (and stopped trials in PlotParams) in a pale grey.
var (
	bestColor  = plot.Color(1)
	otherColor = color.RGBA{190, 190, 190, 255}
)

// namedCurves is how many trials after the best PlotCurves names in its legend, each
// in its own colour.
const namedCurves = 4

// PlotCurves draws the training loss against the iteration of every trial into a PNG
// file at path, each curve a moving average over a twenty-fifth of it: the best trial
// (Rank's first, unless it failed) thick and red, the next ones in colours named in the
// legend with their final validation loss, the others pale. The loss axis leaves out
// the first tenth of the iterations' losses (their initial plunge) from its range. It
// returns the error of writing the file.
func PlotCurves(path string, trials []TrialResult) error {
	ranked := Rank(trials)
	c := plot.Chart{Title: fmt.Sprintf("training loss of %d trials", len(trials)), XLabel: "iteration",
		YLabel: "training loss (nats)"}
	last := 0
	for _, t := range ranked {
		if len(t.Curve) > 0 {
			last = max(last, t.Curve[len(t.Curve)-1].Iteration)
		}
	}
	// The y axis covers shown, the losses after the first tenth of the iterations. The
	// best trial is drawn last, on top.
	var shown []float64
	for i := len(ranked) - 1; i >= 0; i-- {
		t := ranked[i]
		s := plot.Series{Color: otherColor, Line: 1}
		switch {
		case i == 0 && t.State != StateFailed:
			s = plot.Series{Label: curveLabel("best: ", t), Color: bestColor, Line: 3}
		case i <= namedCurves && t.State != StateFailed:
			s = plot.Series{Label: curveLabel("", t), Color: plot.Color(namedColor(i)), Line: 2}
		}
		loss := make([]float64, len(t.Curve))
		for k, p := range t.Curve {
			s.X = append(s.X, float64(p.Iteration))
			loss[k] = p.Loss
		}
		s.Y = plot.Smooth(loss, max(len(loss)/25, 1))
		for k, x := range s.X {
			if x >= float64(last)/10 {
				shown = append(shown, s.Y[k])
			}
		}
		c.Series = append(c.Series, s)
	}
	c.XMin, c.XMax = 0, float64(max(last, 1))
	c.YMin, c.YMax = plot.DataRange(shown, false)
	return c.WritePNG(path, curvesW, curvesH)
}

// namedColor is the palette index of the i-th ranked trial (i ≥ 1): the palette's
// colours but the best's red.
func namedColor(i int) int {
	if i == 1 {
		return 0
	}
	return i
}

// curveLabel names a trial in a legend: its ID and final validation loss.
func curveLabel(prefix string, t TrialResult) string {
	return fmt.Sprintf("%strial %d (%.4g)", prefix, t.ID, t.Final)
}

// PlotParams draws, for each axis, every trial's value of its flag against its final
// validation loss, one panel per axis (three a row) in one PNG file at path: the x axis
// in log scale where the axis says so, categorical for strings and booleans; finished
// trials blue, stopped (and running) ones grey, the best red. Every panel has the same
// loss range. Failed trials and those without a final loss are left out. Without axes
// it draws the flags of the trials' settings on linear axes. It returns the error of
// writing the file.
func PlotParams(path string, trials []TrialResult, axes []Axis) error {
	ranked := Rank(trials)
	if len(axes) == 0 {
		for _, f := range axisFlags(ranked, nil) {
			axes = append(axes, Axis{Flag: f})
		}
	}
	var finals []float64
	for _, t := range ranked {
		finals = append(finals, t.Final)
	}
	lo, hi := plot.DataRange(finals, false)
	charts := make([]plot.Chart, len(axes))
	for i, a := range axes {
		charts[i] = paramChart(ranked, a, i == 0)
		charts[i].YMin, charts[i].YMax = lo, hi
	}
	return plot.WriteGrid(path, charts, panelCols, panelW, panelH)
}

// paramChart is one panel of PlotParams: the ranked trials' values of a.Flag against
// their final loss, with a legend if legend is set.
func paramChart(ranked []TrialResult, a Axis, legend bool) plot.Chart {
	title := a.Flag
	if a.Log {
		title += " (log scale)"
	}
	c := plot.Chart{Title: title, XLog: a.Log, YLabel: "final validation loss"}
	c.XCategories = categories(ranked, a.Flag)
	finished := plot.Series{Color: plot.Color(0), Dot: 4}
	stopped := plot.Series{Color: otherColor, Dot: 3}
	var best plot.Series
	for i, t := range ranked {
		v, ok := settingValue(t.Settings, a.Flag)
		if !ok || t.State == StateFailed || math.IsNaN(t.Final) {
			continue
		}
		x, ok := axisValue(v, c.XCategories)
		if !ok {
			continue
		}
		switch {
		case i == 0:
			best = plot.Series{X: []float64{x}, Y: []float64{t.Final}, Color: bestColor, Dot: 6}
			if legend {
				best.Label = fmt.Sprintf("best: trial %d", t.ID)
			}
		case t.State == StateFinished:
			finished.X, finished.Y = append(finished.X, x), append(finished.Y, t.Final)
		default:
			stopped.X, stopped.Y = append(stopped.X, x), append(stopped.Y, t.Final)
		}
	}
	if legend && len(finished.X) > 0 {
		finished.Label = "finished"
	}
	if legend && len(stopped.X) > 0 {
		stopped.Label = "stopped early"
	}
	c.Series = []plot.Series{stopped, finished, best}
	return c
}

// categories returns the sorted names of a flag's values when any of them is not a
// number (a string or bool), else nil.
func categories(trials []TrialResult, flag string) []string {
	var names []string
	numeric := true
	for _, t := range trials {
		if v, ok := settingValue(t.Settings, flag); ok {
			numeric = numeric && isNumericValue(v)
			if n := fmt.Sprint(v); !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	if numeric {
		return nil
	}
	slices.Sort(names)
	return names
}

// axisValue is a setting's x coordinate: the number, or its index among the categories.
func axisValue(v any, categories []string) (float64, bool) {
	if categories != nil {
		i := slices.Index(categories, fmt.Sprint(v))
		return float64(i), i >= 0
	}
	switch v := v.(type) {
	case float64:
		return v, true
	case float32:
		return float64(v), true
	case int:
		return float64(v), true
	case int64:
		return float64(v), true
	case int32:
		return float64(v), true
	}
	return 0, false
}
