package plot

import (
	"image"
	"image/color"
	"math"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A 300×200 panel's plot area, from the margins: x 70..280 (210 pixels), y 36..150
// (114 pixels, 150 being the bottom).
const (
	testW, testH                       = 300, 200
	areaX0, areaX1, areaYTop, areaYBot = 70, 280, 36, 150
)

var testColor = color.RGBA{200, 0, 100, 255}

// pixelsOf returns the pixels of img with colour c.
func pixelsOf(img image.Image, c color.RGBA) []image.Point { return Pixels(img, img.Bounds(), c) }

// centroid is the mean of the points, rounded.
func centroid(t *testing.T, ps []image.Point) image.Point {
	t.Helper()
	require.NotEmpty(t, ps, "no pixel of the colour")
	var sx, sy int
	for _, p := range ps {
		sx, sy = sx+p.X, sy+p.Y
	}
	return image.Pt(int(math.Round(float64(sx)/float64(len(ps)))), int(math.Round(float64(sy)/float64(len(ps)))))
}

// TestDotPlacement: a dot lands where the axis's arithmetic puts it, on linear, log
// and categorical axes.
func TestDotPlacement(t *testing.T) {
	tests := []struct {
		name  string
		chart Chart
		x, y  float64
		want  image.Point
	}{
		{"linear middle", Chart{XMin: 0, XMax: 10, YMin: 0, YMax: 2}, 5, 1, image.Pt(areaX0+105, areaYBot-57)},
		{"linear quarter", Chart{XMin: 0, XMax: 8, YMin: 1, YMax: 3}, 2, 1.5, image.Pt(areaX0+52, areaYBot-28)},
		{"log middle decade", Chart{XLog: true, XMin: 1e-4, XMax: 1e-2, YMin: 0, YMax: 2}, 1e-3, 1, image.Pt(areaX0+105, areaYBot-57)},
		{"log quarter", Chart{XLog: true, XMin: 1, XMax: 1e4, YMin: 0, YMax: 2}, 10, 1, image.Pt(areaX0+52, areaYBot-57)},
		// 3 categories span -0.5..2.5: index 1 is the middle.
		{"category", Chart{XCategories: []string{"a", "b", "c"}, YMin: 0, YMax: 2}, 1, 1, image.Pt(areaX0+105, areaYBot-57)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.chart.Series = []Series{{X: []float64{tt.x}, Y: []float64{tt.y}, Color: testColor, Dot: 3}}
			img := Grid([]Chart{tt.chart}, 1, testW, testH)
			assert.Equal(t, tt.want, centroid(t, pixelsOf(img, testColor)))
		})
	}
}

// TestDataRange: without a fixed range the data span the plot area with 5% of room,
// and a non-negative range starts at 0 when the room would go below it.
func TestDataRange(t *testing.T) {
	tests := []struct {
		name           string
		vs             []float64
		log            bool
		wantLo, wantHi float64
	}{
		{"room", []float64{10, 30}, false, 9, 31},
		{"clamped at 0", []float64{0.5, 10.5}, false, 0, 11},
		{"negative kept", []float64{-10, 10}, false, -11, 11},
		{"one value", []float64{4}, false, 2.9, 5.1},
		{"log decades", []float64{1e-4, 1e-2}, true, math.Pow(10, -4.1), math.Pow(10, -1.9)},
		{"log one value", []float64{1e-3}, true, math.Pow(10, -3.55), math.Pow(10, -2.45)},
		{"NaN, infinities and non-positive on log left out", []float64{math.NaN(), -1, 0, 1e-4, math.Inf(1), 1e-2}, true, math.Pow(10, -4.1), math.Pow(10, -1.9)},
		{"nothing", []float64{math.NaN()}, false, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lo, hi := DataRange(tt.vs, tt.log)
			assert.InDelta(t, tt.wantLo, lo, 1e-12*math.Max(1, math.Abs(tt.wantLo)))
			assert.InDelta(t, tt.wantHi, hi, 1e-12*math.Max(1, math.Abs(tt.wantHi)))
		})
	}
}

func tickLabels(ts []tick) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.label
	}
	return out
}

func TestTicks(t *testing.T) {
	tests := []struct {
		name   string
		lo, hi float64
		log    bool
		n      int
		want   []string
	}{
		{"units", 0, 10, false, 5, []string{"0", "2", "4", "6", "8", "10"}},
		{"tenths rounded", 0, 0.35, false, 4, []string{"0", "0.1", "0.2", "0.3"}},
		{"fives", 2.6, 9.4, false, 2, []string{"5"}},
		{"hundreds", 0, 300, false, 8, []string{"0", "50", "100", "150", "200", "250", "300"}},
		{"log decades", 8e-5, 3e-2, true, 8, []string{"0.0001", "0.001", "0.01"}},
		{"log 2 and 5 when few decades", 9e-4, 3e-2, true, 8, []string{"0.001", "0.002", "0.005", "0.01", "0.02"}},
		{"log thinned", 1e-10, 1e10, true, 8, []string{"1e-10", "1e-07", "0.0001", "0.1", "100", "100000", "1e+08"}},
		{"log inside a decade: linear", 2.1e-3, 3e-3, true, 8, []string{"0.0025", "0.003"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, tickLabels(scale{log: tt.log, lo: tt.lo, hi: tt.hi}.ticks(tt.n)))
		})
	}
}

// TestLinesClipped: a line towards a point far outside a fixed range, and NaN and
// non-positive points on a log axis, draw nothing outside the plot area and do not
// break the rest.
func TestLinesClipped(t *testing.T) {
	c := Chart{XLog: true, XMin: 1, XMax: 100, YMin: 0, YMax: 1, Series: []Series{{
		X:     []float64{1, 10, 20, 30, -5, 40, 100},
		Y:     []float64{0.5, 1e300, 0.5, math.NaN(), 0.5, 0.5, 0.5},
		Color: testColor, Line: 2,
	}}}
	img := Grid([]Chart{c}, 1, testW, testH)
	ps := pixelsOf(img, testColor)
	require.NotEmpty(t, ps)
	for _, p := range ps {
		require.True(t, p.In(image.Rect(areaX0, areaYTop, areaX1+1, areaYBot+1)), "pixel %v outside the plot area", p)
	}
	// The segment 40..100 at y 0.5 is drawn: its pixels span from log10(40)/2 of the
	// width to the right edge.
	mid := areaYBot - 57
	assert.Contains(t, ps, image.Pt(areaX0+int(math.Log10(40)/2*210), mid))
	assert.Contains(t, ps, image.Pt(areaX1, mid))
}

// TestGrid: small multiples, each panel drawn inside its own rectangle.
func TestGrid(t *testing.T) {
	var charts []Chart
	for i := range 5 {
		c := color.RGBA{uint8(10 + i), 0, 0, 255}
		charts = append(charts, Chart{Title: "panel", Series: []Series{{X: []float64{1, 2}, Y: []float64{1, 2}, Color: c, Line: 1}}})
	}
	img := Grid(charts, 2, testW, testH)
	require.Equal(t, image.Rect(0, 0, 2*testW, 3*testH), img.Bounds())
	for i := range 5 {
		panel := image.Rect(i%2*testW, i/2*testH, i%2*testW+testW, i/2*testH+testH)
		ps := pixelsOf(img, charts[i].Series[0].Color)
		require.NotEmpty(t, ps, "panel %d", i)
		for _, p := range ps {
			require.True(t, p.In(panel), "panel %d: pixel %v outside %v", i, p, panel)
		}
	}
	// The sixth cell is empty.
	for y := 2 * testH; y < 3*testH; y++ {
		for x := testW; x < 2*testW; x++ {
			require.Equal(t, background, img.RGBAAt(x, y))
		}
	}
}

// TestLegend: a labelled series gets a swatch at the top right of the plot area; one
// without a label does not.
func TestLegend(t *testing.T) {
	named := color.RGBA{1, 2, 3, 255}
	c := Chart{Series: []Series{
		{X: []float64{0, 1}, Y: []float64{0, 0}, Color: testColor, Line: 1},
		{Label: "best", X: []float64{0, 1}, Y: []float64{0, 0}, Color: named, Line: 1},
	}}
	img := Grid([]Chart{c}, 1, testW, testH)
	topRight := image.Rect((areaX0+areaX1)/2, areaYTop, areaX1, areaYTop+30)
	inBox := func(col color.RGBA) bool {
		for _, p := range pixelsOf(img, col) {
			if p.In(topRight) {
				return true
			}
		}
		return false
	}
	assert.True(t, inBox(named), "the labelled series' swatch")
	assert.False(t, inBox(testColor), "no swatch for the unlabelled series")

	// Points in the top right corner push the legend to the top left.
	c.Series[0] = Series{X: []float64{0, 0.9, 1}, Y: []float64{0, 1, 1}, Color: testColor, Dot: 2}
	img = Grid([]Chart{c}, 1, testW, testH)
	topLeft := image.Rect(areaX0, areaYTop, (areaX0+areaX1)/2, areaYTop+30)
	found := false
	for _, p := range pixelsOf(img, named) {
		found = found || p.In(topLeft)
	}
	assert.True(t, found, "the swatch at the top left")
}

// TestEmptyAndBadCharts: a chart without a drawable point draws only its title;
// mismatched X and Y panic.
func TestEmptyAndBadCharts(t *testing.T) {
	c := Chart{Title: "nothing", Series: []Series{{X: []float64{math.NaN()}, Y: []float64{1}, Color: testColor, Dot: 3}}}
	img := Grid([]Chart{c}, 1, testW, testH)
	assert.Empty(t, pixelsOf(img, testColor))
	assert.NotEmpty(t, pixelsOf(img, axisColor), "the title")
	assert.Panics(t, func() {
		Grid([]Chart{{Series: []Series{{X: []float64{1, 2}, Y: []float64{1}}}}}, 1, testW, testH)
	})
	assert.Panics(t, func() { WriteGrid("x.png", nil, 0, testW, testH) })
}

func TestSmooth(t *testing.T) {
	v := []float64{4, 2, 6, 8, 1}
	// The mean of the (up to) w values ending at each index, written out.
	assert.Equal(t, v, Smooth(v, 1))
	assert.Equal(t, []float64{4, 3, 4, 7, 4.5}, Smooth(v, 2))
	assert.Equal(t, []float64{4, 3, 4, 16.0 / 3, 5}, Smooth(v, 3))
	assert.Panics(t, func() { Smooth(v, 0) })
}

// TestWritePNG: the file decodes to the chart's size.
func TestWritePNG(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.png")
	c := Chart{Series: []Series{{X: []float64{0, 1}, Y: []float64{0, 1}, Color: testColor, Line: 2}}}
	require.NoError(t, c.WritePNG(path, testW, testH))
	img, err := ReadPNG(path)
	require.NoError(t, err)
	assert.Equal(t, image.Rect(0, 0, testW, testH), img.Bounds())
	assert.NotEmpty(t, pixelsOf(img, testColor))
	assert.Error(t, c.WritePNG(filepath.Join(t.TempDir(), "no", "such", "dir.png"), testW, testH))
}
