package nn

import (
	"math"
	"testing"

	"megago/internal/golden"
	"megago/tensor"
)

// Tolerances of the golden tests (fp32): PyTorch and megago sum in different orders.
const goldenRtol, goldenAtol = 1e-5, 1e-6

// goldenParams returns a golden file's parameters as F32 tensors keyed by HF name.
func goldenParams(dev *tensor.Device, f *golden.File) map[string]*tensor.Tensor {
	out := map[string]*tensor.Tensor{}
	for name, p := range f.Params {
		out[name] = tensor.FromSlice(dev, p.Data, p.Shape...)
	}
	return out
}

// goldenInts returns a golden int input as an I64 tensor.
func goldenInts(dev *tensor.Device, t golden.IntTensor) *tensor.Tensor {
	v := make([]int64, len(t.Data))
	for i, x := range t.Data {
		v[i] = int64(x)
	}
	return tensor.FromSlice(dev, v, t.Shape...)
}

// requireClose fails unless every element satisfies |got−want| ≤ atol + rtol·|want| with
// the golden tolerances.
func requireClose(t *testing.T, what string, got []float64, want []float32) {
	t.Helper()
	requireCloseTol(t, what, got, want, goldenRtol, goldenAtol)
}

// requireCloseTol is requireClose with the given tolerances.
func requireCloseTol(t *testing.T, what string, got []float64, want []float32, rtol, atol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	bad := 0
	for i := range got {
		w := float64(want[i])
		if !(math.Abs(got[i]-w) <= atol+rtol*math.Abs(w)) {
			if bad < 3 {
				t.Errorf("%s[%d] = %.9g, want %.9g", what, i, got[i], w)
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d values differ", what, bad, len(got))
	}
}

// narrowLast returns the first n entries of x's last dim, as float64s (drops vocabulary
// padding from logits).
func narrowLast(x *tensor.Tensor, n int) []float64 {
	return tensor.ToSlice[float64](x.Detach().Narrow(-1, 0, n))
}
