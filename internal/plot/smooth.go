package plot

// Smooth returns the moving average of v over windows of w values: out[i] is the mean
// of v[max(0, i-w+1)..i]. It panics if w < 1.
func Smooth(v []float64, w int) []float64 {
	if w < 1 {
		panic("plot: Smooth: window < 1")
	}
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
