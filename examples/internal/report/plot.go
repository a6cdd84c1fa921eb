package report

import (
	"image/color"

	"megago/internal/plot"
)

// Curve is what the loss plot shows: the training loss of every iteration, the
// validation losses, and a reference line (the unigram entropy, say).
type Curve struct {
	Title          string // above the plot
	TrainIter      []int
	Train          []float64
	ValidIter      []int
	Valid          []float64
	Reference      float64 // dashed line; 0: none
	ReferenceLabel string  // written on the dashed line
}

// Plot colours: the raw training loss pale behind its moving average.
var (
	colTrainRaw  = color.RGBA{170, 200, 235, 255}
	colReference = color.RGBA{120, 120, 120, 255}
)

// The plot's size in pixels.
const PlotW, PlotH = 900, 520

// WritePNG draws the curve into a PNG file at path: the raw training loss, its moving
// average over a fiftieth of the run, and the validation losses as dots joined by a
// line, on an iteration axis from 0.
func (c *Curve) WritePNG(path string) error {
	ch := plot.Chart{Title: c.Title, XLabel: "iteration", YLabel: "loss (nats)"}
	if len(c.Train) > 0 {
		ch.XMin, ch.XMax = 0, float64(max(c.TrainIter[len(c.TrainIter)-1], 1))
		trainIter, validIter := floats(c.TrainIter), floats(c.ValidIter)
		ch.Series = []plot.Series{
			{X: trainIter, Y: c.Train, Color: colTrainRaw, Line: 2},
			{X: trainIter, Y: plot.Smooth(c.Train, max(len(c.Train)/50, 1)), Color: plot.Color(0), Line: 2},
			{X: validIter, Y: c.Valid, Color: plot.Color(1), Line: 2, Dot: 3},
		}
	}
	if c.Reference > 0 {
		ch.Refs = []plot.Ref{{Y: c.Reference, Label: c.ReferenceLabel, Color: colReference}}
	}
	return ch.WritePNG(path, PlotW, PlotH)
}

// floats converts iterations to plot coordinates.
func floats(v []int) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}
