package plot

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"io"
	"slices"

	"megago/internal/atomicfile"
)

// Chart is one panel: a title, two axes with grid lines and tick labels, the series,
// reference lines and a legend of the series that have a label.
type Chart struct {
	Title  string // centred above the plot area
	XLabel string // centred under the x axis
	YLabel string // above the y axis, at the left

	// XLog draws the x axis in log10 scale; points with x ≤ 0 are left out.
	XLog bool
	// XMin and XMax fix the x axis's range; when they are equal it is the data's range
	// with a little room. YMin and YMax do the same for the y axis.
	XMin, XMax, YMin, YMax float64
	// XCategories, when set, makes the x axis categorical: a point's x is an index
	// into it, and the ticks are its names.
	XCategories []string

	Series []Series // drawn in order, the last on top; the legend lists them from the top
	Refs   []Ref
}

// Series is a set of points drawn as a line joining them, as dots, or both.
type Series struct {
	Label string // its entry in the legend; "": none
	X, Y  []float64
	Color color.RGBA
	Line  int // the width of the line joining the points, in pixels; 0: no line
	Dot   int // the radius of a dot drawn at each point, in pixels; 0: no dots
}

// Ref is a dashed horizontal line across the plot area, labelled at its right end.
type Ref struct {
	Y     float64
	Label string
	Color color.RGBA
}

// The colours of the frame.
var (
	background = color.RGBA{255, 255, 255, 255}
	axisColor  = color.RGBA{40, 40, 40, 255}
	gridColor  = color.RGBA{230, 230, 230, 255}
)

// palette is the colours Color cycles through (matplotlib's "tab10").
var palette = [...]color.RGBA{
	{31, 119, 180, 255}, {214, 39, 40, 255}, {44, 160, 44, 255}, {255, 127, 14, 255},
	{148, 103, 189, 255}, {140, 86, 75, 255}, {227, 119, 194, 255}, {188, 189, 34, 255},
	{23, 190, 207, 255}, {127, 127, 127, 255},
}

// Color returns the i-th colour of a palette of ten distinct ones, cycling: Color(0) is
// the strong blue the examples draw their training loss in, Color(1) the red of their
// validation loss. It panics if i < 0.
func Color(i int) color.RGBA { return palette[i%len(palette)] }

// The margins between a panel's edge and its plot area, in pixels: room for the tick
// labels at the left and bottom, the title and y label at the top.
const (
	padLeft, padRight, padTop, padBottom = 70, 20, 36, 50
)

// WritePNG draws the chart into a w×h PNG file at path.
func (c *Chart) WritePNG(path string, w, h int) error {
	return WriteGrid(path, []Chart{*c}, 1, w, h)
}

// WriteGrid draws charts as small multiples into one PNG file at path: cols panels a
// row, each w×h pixels, rows as many as needed. It panics if cols < 1.
func WriteGrid(path string, charts []Chart, cols, w, h int) error {
	if cols < 1 {
		panic(fmt.Sprintf("plot: WriteGrid: %d columns", cols))
	}
	img := Grid(charts, cols, w, h)
	return atomicfile.Write(path, func(wr io.Writer) error { return png.Encode(wr, img) })
}

// Grid draws charts as WriteGrid does and returns the image: min(cols, len(charts))
// panels a row, ceil(len(charts)/cols) rows (at least one panel's size).
func Grid(charts []Chart, cols, w, h int) *image.RGBA {
	ncol := max(min(cols, len(charts)), 1)
	nrow := max((len(charts)+cols-1)/cols, 1)
	img := image.NewRGBA(image.Rect(0, 0, ncol*w, nrow*h))
	draw.Draw(img, img.Bounds(), &image.Uniform{background}, image.Point{}, draw.Src)
	for i := range charts {
		x, y := i%cols*w, i/cols*h
		charts[i].Draw(img, image.Rect(x, y, x+w, y+h))
	}
	return img
}

// Draw draws the chart into the rectangle r of img, over what is there. A chart with
// no finite point draws only its title.
func (c *Chart) Draw(img *image.RGBA, r image.Rectangle) {
	area := image.Rect(r.Min.X+padLeft, r.Min.Y+padTop, r.Max.X-padRight, r.Max.Y-padBottom)
	label(img, r, (area.Min.X+area.Max.X)/2, r.Min.Y+18, c.Title, axisColor, alignCenter)
	xs, ys, ok := c.scales(area)
	if !ok {
		return
	}
	c.drawGrid(img, r, area, xs, ys)
	clip := image.Rectangle{Min: area.Min, Max: area.Max.Add(image.Pt(1, 1))} // the axes' pixels included
	for _, ref := range c.Refs {
		if ref.Y > ys.lo && ref.Y < ys.hi {
			y := ys.pixel(ref.Y)
			hline(img, clip, area.Min.X, area.Max.X, y, ref.Color, 6)
			label(img, r, area.Max.X-4, y-5, ref.Label, ref.Color, alignRight)
		}
	}
	for _, s := range c.Series {
		if len(s.X) != len(s.Y) {
			panic(fmt.Sprintf("plot: series %q: %d x values, %d y values", s.Label, len(s.X), len(s.Y)))
		}
		for i := 1; i < len(s.X) && s.Line > 0; i++ {
			if xs.valid(s.X[i-1]) && xs.valid(s.X[i]) && ys.valid(s.Y[i-1]) && ys.valid(s.Y[i]) {
				line(img, clip, xs.pixel(s.X[i-1]), ys.pixel(s.Y[i-1]), xs.pixel(s.X[i]), ys.pixel(s.Y[i]), s.Line, s.Color)
			}
		}
		for i := range s.X {
			if s.Dot > 0 && xs.valid(s.X[i]) && ys.valid(s.Y[i]) {
				dot(img, r, xs.pixel(s.X[i]), ys.pixel(s.Y[i]), s.Dot, s.Color)
			}
		}
	}
	hline(img, r, area.Min.X, area.Max.X, area.Max.Y, axisColor, 1)
	vline(img, r, area.Min.X, area.Min.Y, area.Max.Y, axisColor)
	label(img, r, (area.Min.X+area.Max.X)/2, r.Max.Y-12, c.XLabel, axisColor, alignCenter)
	label(img, r, r.Min.X+8, area.Min.Y-10, c.YLabel, axisColor, alignLeft)
	c.drawLegend(img, area, xs, ys)
}

// drawGrid draws the grid lines and tick labels of both axes.
func (c *Chart) drawGrid(img *image.RGBA, r, area image.Rectangle, xs, ys scale) {
	for _, t := range ys.ticks(6) {
		y := ys.pixel(t.v)
		hline(img, r, area.Min.X, area.Max.X, y, gridColor, 1)
		label(img, r, area.Min.X-8, y+4, t.label, axisColor, alignRight)
	}
	xticks := xs.ticks(8)
	if c.XCategories != nil {
		xticks = categoryTicks(c.XCategories)
	}
	for _, t := range xticks {
		x := xs.pixel(t.v)
		vline(img, r, x, area.Min.Y, area.Max.Y, gridColor)
		label(img, r, x, area.Max.Y+18, t.label, axisColor, alignCenter)
	}
}

// drawLegend lists the labelled series, the topmost (the last drawn) first, in a box
// in the corner of the plot area that covers the fewest points: top right, else top
// left, bottom right, bottom left.
func (c *Chart) drawLegend(img *image.RGBA, area image.Rectangle, xs, ys scale) {
	var entries []Series
	width := 0
	for _, s := range slices.Backward(c.Series) {
		if s.Label != "" {
			entries = append(entries, s)
			width = max(width, textWidth(s.Label))
		}
	}
	if len(entries) == 0 {
		return
	}
	const swatch, rowH, pad = 22, 15, 6
	size := image.Pt(width+swatch+3*pad, len(entries)*rowH+2*pad)
	in := area.Inset(pad)
	var box image.Rectangle
	fewest := -1
	for _, at := range []image.Point{
		{in.Max.X - size.X, in.Min.Y}, {in.Min.X, in.Min.Y},
		{in.Max.X - size.X, in.Max.Y - size.Y}, {in.Min.X, in.Max.Y - size.Y},
	} {
		b := image.Rectangle{Min: at, Max: at.Add(size)}.Intersect(area)
		if n := c.pointsIn(b, xs, ys); fewest < 0 || n < fewest {
			box, fewest = b, n
		}
	}
	draw.Draw(img, box, &image.Uniform{background}, image.Point{}, draw.Src)
	border(img, box, gridColor)
	for i, s := range entries {
		y := box.Min.Y + pad + i*rowH + rowH/2
		x := box.Min.X + pad
		if s.Line > 0 {
			line(img, box, x, y, x+swatch, y, min(s.Line, 3), s.Color)
		}
		if s.Dot > 0 {
			dot(img, box, x+swatch/2, y, min(s.Dot, 4), s.Color)
		}
		label(img, box, x+swatch+pad, y+4, s.Label, axisColor, alignLeft)
	}
}

// pointsIn counts the series' points whose pixels lie in r.
func (c *Chart) pointsIn(r image.Rectangle, xs, ys scale) int {
	n := 0
	for _, s := range c.Series {
		for i := range s.X {
			if xs.valid(s.X[i]) && ys.valid(s.Y[i]) && image.Pt(xs.pixel(s.X[i]), ys.pixel(s.Y[i])).In(r) {
				n++
			}
		}
	}
	return n
}
