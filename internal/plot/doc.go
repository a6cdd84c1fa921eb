// Package plot draws the PNG charts megago writes for a person to look at: the loss
// curve of a training run (the examples' loss.png), the loss curves of many trials of a
// hyperparameter search with the best one highlighted, and each searched setting against
// the loss, one small panel per setting in one PNG. It draws with the standard library's
// image packages and the 7×13 bitmap font of golang.org/x/image; nothing else.
//
// # Reading order
//
//   - chart.go: Chart, one panel (title, axes with grid lines and tick labels, a legend
//     in the emptiest corner), its Series (points joined by a line, dots, or both) and
//     Ref (a dashed horizontal line with a label); Color, a palette of ten; Chart.WritePNG
//     writes one chart, WriteGrid several side by side (small multiples), Grid draws
//     them into an image, Chart.Draw into a rectangle of one.
//   - scale.go: how data coordinates become pixels: a linear, log10 or categorical axis,
//     DataRange (the range taken from the data when a Chart does not fix it), and the
//     round tick values.
//   - raster.go: the pixel drawing (lines, dots, text), clipped to a rectangle.
//   - smooth.go: Smooth, the moving average a noisy training loss is drawn with.
//   - pixels.go: Pixels, which finds a colour in an image: how tests check a chart.
//
// # Invariants
//
// Drawing is a pure function of the Chart and the image size: the same chart gives the
// same pixels. Points whose coordinates are NaN or infinite, or not positive on a log
// axis, are left out (a line breaks there); lines are clipped to the plot area, so a
// Chart may fix a range narrower than its data. A Chart is not modified by drawing it.
//
// # Errors
//
// WritePNG and WriteGrid return the error of writing the file, which they write
// atomically (package internal/atomicfile): a reader never sees half an image.
// Mismatched lengths of a Series' X and Y are a caller bug and panic.
package plot
