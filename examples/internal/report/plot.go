package report

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"os"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
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

// Plot colours.
var (
	colBackground = color.RGBA{255, 255, 255, 255}
	colAxis       = color.RGBA{40, 40, 40, 255}
	colGrid       = color.RGBA{230, 230, 230, 255}
	colTrainRaw   = color.RGBA{170, 200, 235, 255}
	colTrain      = color.RGBA{31, 119, 180, 255}
	colValid      = color.RGBA{214, 39, 40, 255}
	colReference  = color.RGBA{120, 120, 120, 255}
)

// The plot's size and margins in pixels.
const (
	PlotW, PlotH                       = 900, 520
	padLeft, padRight, padTop, padBott = 70, 20, 36, 50
)

// WritePNG draws the curve into a PNG file at path.
func (c *Curve) WritePNG(path string) error {
	img := image.NewRGBA(image.Rect(0, 0, PlotW, PlotH))
	draw.Draw(img, img.Bounds(), &image.Uniform{colBackground}, image.Point{}, draw.Src)
	if len(c.Train) == 0 {
		return writeImage(path, img)
	}
	x0, x1 := 0.0, float64(max(c.TrainIter[len(c.TrainIter)-1], 1))
	y0, y1 := c.yRange()
	px := func(x float64) int { return padLeft + int((x-x0)/(x1-x0)*float64(PlotW-padLeft-padRight)) }
	py := func(y float64) int { return PlotH - padBott - int((y-y0)/(y1-y0)*float64(PlotH-padTop-padBott)) }

	for _, t := range ticks(y0, y1, 6) {
		hline(img, padLeft, PlotW-padRight, py(t), colGrid, 1)
		label(img, padLeft-8, py(t)+4, fmt.Sprintf("%g", t), colAxis, alignRight)
	}
	for _, t := range ticks(x0, x1, 8) {
		vline(img, px(t), padTop, PlotH-padBott, colGrid)
		label(img, px(t), PlotH-padBott+18, fmt.Sprintf("%g", t), colAxis, alignCenter)
	}
	if c.Reference > y0 && c.Reference < y1 {
		hline(img, padLeft, PlotW-padRight, py(c.Reference), colReference, 6)
		label(img, PlotW-padRight-4, py(c.Reference)-5, c.ReferenceLabel, colReference, alignRight)
	}
	polyline(img, c.TrainIter, c.Train, px, py, colTrainRaw)
	polyline(img, c.TrainIter, smooth(c.Train, max(len(c.Train)/50, 1)), px, py, colTrain)
	polyline(img, c.ValidIter, c.Valid, px, py, colValid)
	for i := range c.Valid {
		dot(img, px(float64(c.ValidIter[i])), py(c.Valid[i]), colValid)
	}
	// Axes, title and legend.
	hline(img, padLeft, PlotW-padRight, PlotH-padBott, colAxis, 1)
	vline(img, padLeft, padTop, PlotH-padBott, colAxis)
	label(img, (padLeft+PlotW-padRight)/2, PlotH-12, "iteration", colAxis, alignCenter)
	label(img, 8, padTop-10, "loss (nats)", colAxis, alignLeft)
	label(img, PlotW/2, 18, c.Title, colAxis, alignCenter)
	return writeImage(path, img)
}

// yRange covers every point, with a little room.
func (c *Curve) yRange() (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, s := range [][]float64{c.Train, c.Valid} {
		for _, v := range s {
			if !math.IsNaN(v) && !math.IsInf(v, 0) {
				lo, hi = math.Min(lo, v), math.Max(hi, v)
			}
		}
	}
	if c.Reference > 0 {
		lo, hi = math.Min(lo, c.Reference), math.Max(hi, c.Reference)
	}
	if !(hi > lo) {
		lo, hi = lo-1, lo+1
	}
	pad := (hi - lo) * 0.05
	return math.Max(0, lo-pad), hi + pad
}

// smooth returns the moving average of v over the previous w values.
func smooth(v []float64, w int) []float64 {
	out := make([]float64, len(v))
	sum := 0.0
	for i, x := range v {
		sum += x
		if i >= w {
			sum -= v[i-w]
		}
		out[i] = sum / float64(min(i+1, w))
	}
	return out
}

// ticks returns about n round numbers between lo and hi.
func ticks(lo, hi float64, n int) []float64 {
	step := math.Pow(10, math.Floor(math.Log10((hi-lo)/float64(n))))
	for _, m := range []float64{1, 2, 5, 10} {
		if (hi-lo)/(step*m) <= float64(n) {
			step *= m
			break
		}
	}
	var out []float64
	for t := math.Ceil(lo/step) * step; t <= hi+step*1e-9; t += step {
		out = append(out, math.Round(t/step)*step)
	}
	return out
}

func polyline(img *image.RGBA, xs []int, ys []float64, px func(float64) int, py func(float64) int, c color.RGBA) {
	for i := 1; i < len(xs); i++ {
		if math.IsNaN(ys[i-1]+ys[i]) || math.IsInf(ys[i-1]+ys[i], 0) {
			continue
		}
		line(img, px(float64(xs[i-1])), py(ys[i-1]), px(float64(xs[i])), py(ys[i]), c)
	}
}

// line draws a two-pixel-wide segment (Bresenham).
func line(img *image.RGBA, x0, y0, x1, y1 int, c color.RGBA) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := sign(x1-x0), sign(y1-y0)
	e := dx + dy
	for {
		img.SetRGBA(x0, y0, c)
		img.SetRGBA(x0, y0+1, c)
		if x0 == x1 && y0 == y1 {
			return
		}
		e2 := 2 * e
		if e2 >= dy {
			e += dy
			x0 += sx
		}
		if e2 <= dx {
			e += dx
			y0 += sy
		}
	}
}

// hline draws a horizontal line, dashed with dashes of length dash (1: solid).
func hline(img *image.RGBA, x0, x1, y int, c color.RGBA, dash int) {
	for x := x0; x <= x1; x++ {
		if dash == 1 || (x/dash)%2 == 0 {
			img.SetRGBA(x, y, c)
		}
	}
}

func vline(img *image.RGBA, x, y0, y1 int, c color.RGBA) {
	for y := y0; y <= y1; y++ {
		img.SetRGBA(x, y, c)
	}
}

func dot(img *image.RGBA, x, y int, c color.RGBA) {
	for dy := -3; dy <= 3; dy++ {
		for dx := -3; dx <= 3; dx++ {
			if dx*dx+dy*dy <= 9 {
				img.SetRGBA(x+dx, y+dy, c)
			}
		}
	}
}

type align int

const (
	alignLeft align = iota
	alignCenter
	alignRight
)

// label writes s with its baseline at y, aligned on x.
func label(img *image.RGBA, x, y int, s string, c color.RGBA, a align) {
	d := font.Drawer{Dst: img, Src: &image.Uniform{c}, Face: basicfont.Face7x13}
	w := d.MeasureString(s).Ceil()
	switch a {
	case alignCenter:
		x -= w / 2
	case alignRight:
		x -= w
	}
	d.Dot = fixed.P(x, y)
	d.DrawString(s)
}

func writeImage(path string, img image.Image) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func abs(x int) int { return max(x, -x) }

func sign(x int) int {
	switch {
	case x > 0:
		return 1
	case x < 0:
		return -1
	}
	return 0
}
