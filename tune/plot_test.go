package tune

import (
	"image"
	"image/color"
	"math"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"megago/internal/plot"
)

// The colours the plots are specified to use: the best trial red, finished trials (and
// the second best's curve) blue, the rest pale grey.
var (
	red  = color.RGBA{214, 39, 40, 255}
	blue = color.RGBA{31, 119, 180, 255}
	grey = color.RGBA{190, 190, 190, 255}
)

// decodePNG reads the PNG file at path.
func decodePNG(t *testing.T, path string) image.Image {
	t.Helper()
	img, err := plot.ReadPNG(path)
	require.NoError(t, err)
	return img
}

// meanX is the mean x of the points.
func meanX(t *testing.T, ps []image.Point) float64 {
	t.Helper()
	require.NotEmpty(t, ps)
	s := 0
	for _, p := range ps {
		s += p.X
	}
	return float64(s) / float64(len(ps))
}

// lowest is the largest y (lowest on screen) of the points.
func lowest(t *testing.T, ps []image.Point) int {
	t.Helper()
	require.NotEmpty(t, ps)
	y := ps[0].Y
	for _, p := range ps {
		y = max(y, p.Y)
	}
	return y
}

// decay is a training-loss curve falling from 10 towards floor over n iterations.
func decay(n int, floor float64) []Point {
	out := make([]Point, n)
	for i := range out {
		out[i] = Point{i + 1, floor + (10-floor)*math.Exp(-float64(i)/20)}
	}
	return out
}

// TestPlotCurves: a PNG of the chart's size in which the best trial's curve is the
// red one (it ends lowest), the second best's blue, and the others pale.
func TestPlotCurves(t *testing.T) {
	var trials []TrialResult
	floors := []float64{3.8, 3.5, 3.9, 3.1, 4.2, 4.0, 3.3}
	for i, f := range floors {
		trials = append(trials, TrialResult{ID: i + 1, State: "finished", Rungs: []RungLoss{{200, f + 0.1}},
			Final: f + 0.1, Curve: decay(200, f)})
	}
	trials = append(trials, TrialResult{ID: 8, State: "failed", Final: math.NaN(), Curve: decay(30, 5)})
	path := filepath.Join(t.TempDir(), "curves.png")
	require.NoError(t, PlotCurves(path, trials))
	img := decodePNG(t, path)
	require.Equal(t, image.Rect(0, 0, 900, 520), img.Bounds())
	all := img.Bounds()
	reds, blues := plot.Pixels(img, all, red), plot.Pixels(img, all, blue)
	require.NotEmpty(t, reds, "the best trial's curve")
	assert.Greater(t, lowest(t, reds), lowest(t, blues), "the red curve (trial 4, floor 3.1) ends below the blue one (trial 7, floor 3.3)")
	assert.NotEmpty(t, plot.Pixels(img, all, grey), "the trials after the named ones")

	// No trials: an empty chart, still a PNG.
	require.NoError(t, PlotCurves(path, nil))
	assert.Equal(t, image.Rect(0, 0, 900, 520), decodePNG(t, path).Bounds())
}

// TestPlotParams: one panel per axis; the best trial's dot lies where its setting is on
// a categorical, a log and a linear axis, against the other finished trials' dots.
func TestPlotParams(t *testing.T) {
	mk := func(id int, state string, lr float64, warmup int64, style string, loss float64) TrialResult {
		return TrialResult{ID: id, State: state, Final: loss, Rungs: []RungLoss{{100, loss}},
			Settings: []Setting{{"lr", lr}, {"lr-warmup-iters", warmup}, {"lr-decay-style", style}}}
	}
	trials := []TrialResult{
		mk(1, "finished", 1e-4, 0, "constant", 3.5),
		mk(2, "finished", 1e-3, 10, "cosine", 3.0), // the best
		mk(3, "finished", 1e-2, 100, "linear", 3.6),
		mk(4, "stopped", 3e-2, 50, "linear", 4.0),
		{ID: 5, State: "failed", Final: math.NaN(), Settings: []Setting{{"lr", 1.0}}},
	}
	trials[3].Rungs = []RungLoss{{30, 4.0}}
	axes := []Axis{{"lr-decay-style", false}, {"lr", true}, {"lr-warmup-iters", false}}
	path := filepath.Join(t.TempDir(), "params.png")
	require.NoError(t, PlotParams(path, trials, axes))
	img := decodePNG(t, path)
	const w, h = 420, 300 // a panel
	require.Equal(t, image.Rect(0, 0, 3*w, h), img.Bounds())
	panel := func(i int) image.Rectangle { return image.Rect(i*w, 0, (i+1)*w, h) }

	require.NotEmpty(t, plot.Pixels(img, panel(0), red), "the best trial in the categorical panel")
	assert.NotEmpty(t, plot.Pixels(img, panel(0), grey), "the stopped trial")

	// between returns where the best's dot lies between the two finished trials' dots
	// of panel i (0: on the left one, 1: on the right one).
	between := func(i int) float64 {
		reds := plot.Pixels(img, panel(i), red)
		bx := meanX(t, reds)
		var left, right []image.Point
		for _, p := range plot.Pixels(img, panel(i), blue) {
			if float64(p.X) < bx {
				left = append(left, p)
			} else {
				right = append(right, p)
			}
		}
		l, r := meanX(t, left), meanX(t, right)
		return (bx - l) / (r - l)
	}
	// lr 1e-3 is half-way from 1e-4 to 1e-2 on a log axis.
	assert.InDelta(t, 0.5, between(1), 0.01, "log axis")
	// 10 warmup iterations are a tenth of the way from 0 to 100 on a linear axis.
	assert.InDelta(t, 0.1, between(2), 0.01, "linear axis")

	// Without axes: a linear panel for each flag of the settings.
	require.NoError(t, PlotParams(path, trials, nil))
	assert.Equal(t, image.Rect(0, 0, 3*w, h), decodePNG(t, path).Bounds())
}
