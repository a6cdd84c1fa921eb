package plot

import (
	"fmt"
	"image"
	"math"
	"strconv"
)

// scale maps one axis's data coordinates to pixels: lo to origin, hi to origin+dir·size,
// linearly in the value or (log) in its log10.
type scale struct {
	log          bool
	lo, hi       float64 // the range shown, in data units
	origin, size int     // the pixel of lo, and the pixels from lo to hi
	dir          int     // +1: pixels grow with the value (x); -1: they shrink (y)
}

// frac is where v lies between lo (0) and hi (1).
func (s scale) frac(v float64) float64 {
	if s.log {
		return math.Log10(v/s.lo) / math.Log10(s.hi/s.lo)
	}
	return (v - s.lo) / (s.hi - s.lo)
}

// pixel is v's pixel coordinate, truncated towards lo's pixel; a value more than a
// million ranges away is taken to be a million ranges away (a line towards it keeps
// its direction within the plot area).
func (s scale) pixel(v float64) int {
	f := max(-1e6, min(1e6, s.frac(v)))
	return s.origin + s.dir*int(f*float64(s.size))
}

// valid reports whether v can be drawn on the axis: finite, and positive on a log axis.
func (s scale) valid(v float64) bool {
	return !math.IsNaN(v) && !math.IsInf(v, 0) && (!s.log || v > 0)
}

// scales returns the chart's x and y scales over the plot area, or false when it has
// no point to draw.
func (c *Chart) scales(area image.Rectangle) (xs, ys scale, ok bool) {
	xs = scale{log: c.XLog, origin: area.Min.X, size: area.Dx(), dir: 1}
	ys = scale{origin: area.Max.Y, size: area.Dy(), dir: -1}
	var xv, yv []float64
	for _, s := range c.Series {
		for i := range min(len(s.X), len(s.Y)) {
			if xs.valid(s.X[i]) && ys.valid(s.Y[i]) {
				xv, yv = append(xv, s.X[i]), append(yv, s.Y[i])
			}
		}
	}
	if len(xv) == 0 {
		return xs, ys, false
	}
	for _, r := range c.Refs {
		if ys.valid(r.Y) {
			yv = append(yv, r.Y)
		}
	}
	switch {
	case c.XMin != c.XMax:
		xs.lo, xs.hi = c.XMin, c.XMax
	case c.XCategories != nil:
		xs.lo, xs.hi = -0.5, float64(len(c.XCategories))-0.5
	default:
		xs.lo, xs.hi = DataRange(xv, c.XLog)
	}
	if c.YMin != c.YMax {
		ys.lo, ys.hi = c.YMin, c.YMax
	} else {
		ys.lo, ys.hi = DataRange(yv, false)
	}
	return xs, ys, !(xs.log && xs.lo <= 0)
}

// DataRange is the range a Chart shows when it does not fix one: it covers the finite
// values of vs (the positive ones on a log axis) with 5% of room at each end (in log10
// on a log axis). A single value gets ±1 (half a decade on a log axis); on a linear
// axis, values that are all ≥ 0 are not given room below 0. With no such value it
// returns 0, 0.
func DataRange(vs []float64, log bool) (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, v := range vs {
		if math.IsNaN(v) || math.IsInf(v, 0) || (log && v <= 0) {
			continue
		}
		if log {
			v = math.Log10(v)
		}
		lo, hi = math.Min(lo, v), math.Max(hi, v)
	}
	if math.IsInf(lo, 1) {
		return 0, 0
	}
	nonNegative := lo >= 0
	if !(hi > lo) {
		d := 1.0
		if log {
			d = 0.5
		}
		lo, hi = lo-d, hi+d
	}
	pad := (hi - lo) * 0.05
	lo, hi = lo-pad, hi+pad
	if log {
		return math.Pow(10, lo), math.Pow(10, hi)
	}
	if nonNegative {
		lo = math.Max(0, lo)
	}
	return lo, hi
}

// tick is a value marked on an axis and its label.
type tick struct {
	v     float64
	label string
}

// ticks returns about n round values within the scale's range: multiples of 1, 2 or 5
// times a power of ten on a linear axis; powers of ten (and their 2 and 5 multiples
// when they are few) on a log axis.
func (s scale) ticks(n int) []tick {
	if s.log {
		return logTicks(s.lo, s.hi, n)
	}
	return linearTicks(s.lo, s.hi, n)
}

// linearTicks returns about n multiples of one step (1, 2 or 5 times a power of ten)
// between lo and hi.
func linearTicks(lo, hi float64, n int) []tick {
	if !(hi > lo) || math.IsInf(hi-lo, 0) {
		return nil
	}
	step := math.Pow(10, math.Floor(math.Log10((hi-lo)/float64(n))))
	for _, m := range []float64{1, 2, 5, 10} {
		if (hi-lo)/(step*m) <= float64(n) {
			step *= m
			break
		}
	}
	// Labels are rounded to the step's decimals: 3 × 0.1 is "0.3", not "0.30000000000000004".
	unit := math.Pow(10, math.Floor(math.Log10(step)))
	var out []tick
	for t := math.Ceil(lo/step) * step; t <= hi+step*1e-9; t += step {
		v := math.Round(t/step) * step
		shown := v
		if unit < 1 {
			shown = math.Round(v/unit) / math.Round(1/unit)
		}
		out = append(out, tick{v, strconv.FormatFloat(shown, 'g', -1, 64)})
	}
	return out
}

// logTicks returns the powers of ten between lo and hi (every k-th when there are
// more than n), with 2 and 5 times them when there are fewer than 3, or linear ticks
// when a range inside one decade has fewer than 2 of those.
func logTicks(lo, hi float64, n int) []tick {
	if !(hi > lo) || !(lo > 0) || math.IsInf(hi, 0) {
		return nil
	}
	d0, d1 := int(math.Ceil(math.Log10(lo)-1e-9)), int(math.Floor(math.Log10(hi)+1e-9))
	every := max(1, (d1-d0+n)/n)
	mults := []float64{1}
	if d1-d0+1 < 3 {
		mults = []float64{1, 2, 5}
	}
	var out []tick
	for d := d0 - 1; d <= d1; d++ {
		if (d-d0)%every != 0 {
			continue
		}
		for _, m := range mults {
			v := m * math.Pow(10, float64(d))
			if v >= lo*(1-1e-9) && v <= hi*(1+1e-9) {
				out = append(out, tick{v, strconv.FormatFloat(v, 'g', -1, 64)})
			}
		}
	}
	if len(out) < 2 {
		return linearTicks(lo, hi, 4)
	}
	return out
}

// categoryTicks marks each category at its index.
func categoryTicks(names []string) []tick {
	out := make([]tick, len(names))
	for i, n := range names {
		out[i] = tick{float64(i), n}
	}
	return out
}

// String describes the scale, for test failures.
func (s scale) String() string {
	return fmt.Sprintf("scale{log %v, [%g, %g] → pixel %d%+d·%d}", s.log, s.lo, s.hi, s.origin, s.dir, s.size)
}
