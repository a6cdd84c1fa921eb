package plot

import (
	"image"
	"image/color"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// set colours the pixel (x, y) if it lies in clip.
func set(img *image.RGBA, clip image.Rectangle, x, y int, c color.RGBA) {
	if (image.Point{x, y}).In(clip) {
		img.SetRGBA(x, y, c)
	}
}

// line draws a segment width pixels thick (stacked vertically: rows -(width-1)/2 to
// width/2 around it) with Bresenham's algorithm, clipped to clip. A segment that
// leaves clip far behind is first cut to it (Liang–Barsky), so that its length in
// pixels stays that of the clip rectangle.
func line(img *image.RGBA, clip image.Rectangle, x0, y0, x1, y1, width int, c color.RGBA) {
	far := clip.Inset(-clip.Dx() - clip.Dy() - 16)
	if !(image.Point{x0, y0}).In(far) || !(image.Point{x1, y1}).In(far) {
		var ok bool
		if x0, y0, x1, y1, ok = cut(far, x0, y0, x1, y1); !ok {
			return
		}
	}
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := sign(x1-x0), sign(y1-y0)
	e := dx + dy
	for {
		for w := -(width - 1) / 2; w <= width/2; w++ {
			set(img, clip, x0, y0+w, c)
		}
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

// cut returns the part of the segment inside r (Liang–Barsky), or false if none is.
func cut(r image.Rectangle, x0, y0, x1, y1 int) (int, int, int, int, bool) {
	t0, t1 := 0.0, 1.0
	dx, dy := float64(x1-x0), float64(y1-y0)
	for _, e := range [4][2]float64{
		{-dx, float64(x0 - r.Min.X)}, {dx, float64(r.Max.X - 1 - x0)},
		{-dy, float64(y0 - r.Min.Y)}, {dy, float64(r.Max.Y - 1 - y0)},
	} {
		p, q := e[0], e[1]
		switch {
		case p == 0 && q < 0:
			return 0, 0, 0, 0, false
		case p < 0:
			t0 = max(t0, q/p)
		case p > 0:
			t1 = min(t1, q/p)
		}
	}
	if t0 > t1 {
		return 0, 0, 0, 0, false
	}
	at := func(t float64) (int, int) { return x0 + int(t*dx), y0 + int(t*dy) }
	a, b := at(t0)
	c, d := at(t1)
	return a, b, c, d, true
}

// hline draws a horizontal line from x0 to x1, dashed with dashes of length dash
// (1: solid).
func hline(img *image.RGBA, clip image.Rectangle, x0, x1, y int, c color.RGBA, dash int) {
	for x := x0; x <= x1; x++ {
		if dash == 1 || (x/dash)%2 == 0 {
			set(img, clip, x, y, c)
		}
	}
}

// vline draws a vertical line from y0 to y1.
func vline(img *image.RGBA, clip image.Rectangle, x, y0, y1 int, c color.RGBA) {
	for y := y0; y <= y1; y++ {
		set(img, clip, x, y, c)
	}
}

// border draws the outline of r, inside it.
func border(img *image.RGBA, r image.Rectangle, c color.RGBA) {
	hline(img, r, r.Min.X, r.Max.X-1, r.Min.Y, c, 1)
	hline(img, r, r.Min.X, r.Max.X-1, r.Max.Y-1, c, 1)
	vline(img, r, r.Min.X, r.Min.Y, r.Max.Y-1, c)
	vline(img, r, r.Max.X-1, r.Min.Y, r.Max.Y-1, c)
}

// dot draws a filled disc of radius rad centred on (x, y).
func dot(img *image.RGBA, clip image.Rectangle, x, y, rad int, c color.RGBA) {
	for dy := -rad; dy <= rad; dy++ {
		for dx := -rad; dx <= rad; dx++ {
			if dx*dx+dy*dy <= rad*rad {
				set(img, clip, x+dx, y+dy, c)
			}
		}
	}
}

// align is where a label's x lies: at its left end, its centre or its right end.
type align int

const (
	alignLeft align = iota
	alignCenter
	alignRight
)

// face is the font of every label: 7 pixels wide, 13 high.
var face = basicfont.Face7x13

// textWidth is s's width in pixels.
func textWidth(s string) int { return font.MeasureString(face, s).Ceil() }

// label writes s with its baseline at y, aligned on x, clipped to clip.
func label(img *image.RGBA, clip image.Rectangle, x, y int, s string, c color.RGBA, a align) {
	if s == "" {
		return
	}
	switch a {
	case alignCenter:
		x -= textWidth(s) / 2
	case alignRight:
		x -= textWidth(s)
	}
	dst, ok := img.SubImage(clip).(*image.RGBA)
	if !ok {
		return
	}
	d := font.Drawer{Dst: dst, Src: &image.Uniform{c}, Face: face, Dot: fixed.P(x, y)}
	d.DrawString(s)
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
