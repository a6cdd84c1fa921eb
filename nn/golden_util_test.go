package nn

import (
	"math"
	"testing"

	"megago/internal/golden"
	"megago/tensor"

	"github.com/stretchr/testify/require"
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

// opsVariants are the two ways a Builder can make layers: with tensor's fused ops and with
// the unfused compositions that define them. Golden tests run both against PyTorch.
var opsVariants = []opsVariant{{"fused", false}, {"unfused", true}}

// opsVariant is a way of building layers: Builder.Unfused set or not.
type opsVariant struct {
	name    string
	unfused bool
}

// requireFusedRan fails unless a run with the fused ops called each of ops (and a run with
// the unfused ones called none): the model took the path it was built for.
func requireFusedRan(t *testing.T, run rankRun, unfused bool, ops ...tensor.FusedOp) {
	t.Helper()
	if unfused {
		for op, n := range run.fused {
			require.Zero(t, n, "unfused model called fused %v", op)
		}
		return
	}
	for _, op := range ops {
		require.Positive(t, run.fused[op], "fused %v did not run", op)
	}
}

// gridCase is one case of testGrid: a way of building layers and a TP size.
type gridCase struct {
	ops opsVariant
	tp  int
}

// testGrid returns every pair of ops variant and TP size.
func testGrid(variants []opsVariant, tps []int) []gridCase {
	var out []gridCase
	for _, v := range variants {
		for _, tp := range tps {
			out = append(out, gridCase{ops: v, tp: tp})
		}
	}
	return out
}
