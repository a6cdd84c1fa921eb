package plot

import (
	"image"
	"image/color"
	"image/png"
	"os"
)

// ReadPNG decodes the PNG file at path: what a test of a written chart reads back.
func ReadPNG(path string) (image.Image, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return png.Decode(f)
}

// Pixels returns the pixels of img inside r whose colour is c, row by row: what a test
// of a chart looks for (is the highlighted series drawn, and where).
func Pixels(img image.Image, r image.Rectangle, c color.RGBA) []image.Point {
	var out []image.Point
	r = r.Intersect(img.Bounds())
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			if color.RGBAModel.Convert(img.At(x, y)) == c {
				out = append(out, image.Pt(x, y))
			}
		}
	}
	return out
}
