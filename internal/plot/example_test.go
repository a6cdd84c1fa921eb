package plot_test

import (
	"fmt"
	"math"
	"os"
	"path/filepath"

	"megago/internal/plot"
)

// Two panels side by side in one PNG: loss curves of three trials with the best drawn
// thick and named in the legend, and the learning rate of each against its loss on a
// log axis.
func Example() {
	lrs := []float64{1e-4, 1e-3, 1e-2}
	curves := plot.Chart{Title: "training loss", XLabel: "iteration", YLabel: "loss"}
	params := plot.Chart{Title: "lr", XLog: true, YLabel: "loss"}
	for i, lr := range lrs {
		var it, loss []float64
		for k := 1; k <= 100; k++ {
			it = append(it, float64(k))
			loss = append(loss, 3+5*math.Exp(-float64(k)*lr*50))
		}
		s := plot.Series{X: it, Y: loss, Color: plot.Color(9), Line: 1}
		if lr == 1e-2 {
			s = plot.Series{Label: "best", X: it, Y: loss, Color: plot.Color(1), Line: 3}
		}
		curves.Series = append(curves.Series, s)
		params.Series = append(params.Series, plot.Series{X: []float64{lr}, Y: loss[len(loss)-1:], Color: plot.Color(i), Dot: 4})
	}
	path := filepath.Join(os.TempDir(), "plot-example.png")
	defer os.Remove(path)
	if err := plot.WriteGrid(path, []plot.Chart{curves, params}, 2, 400, 300); err != nil {
		fmt.Println(err)
		return
	}
	img, err := plot.ReadPNG(path)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(img.Bounds().Dx(), "×", img.Bounds().Dy())
	// Output:
	// 800 × 300
}
