package tensor_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"megago/tensor"
)

// groupedCase is a GroupedMatMul test shape: x [T, K], w [E, K, N] ([E, N, K] if transB).
type groupedCase struct {
	k, n   int
	counts []int
	transB bool
}

func (c groupedCase) String() string {
	return fmt.Sprintf("K%d N%d counts%v transB=%v", c.k, c.n, c.counts, c.transB)
}

func (c groupedCase) shapes() (xs, ws []int) {
	T := 0
	for _, n := range c.counts {
		T += n
	}
	ws = []int{len(c.counts), c.k, c.n}
	if c.transB {
		ws = []int{len(c.counts), c.n, c.k}
	}
	return []int{T, c.k}, ws
}

// operands returns random x and w of the case's shapes in dtype dt.
func (c groupedCase) operands(dev *tensor.Device, r *rand.Rand, dt tensor.DType) (x, w *tensor.Tensor) {
	xs, ws := c.shapes()
	return randTensor(dev, r, dt, xs), randTensor(dev, r, dt, ws)
}

func groupedCases() []groupedCase {
	return []groupedCase{
		{k: 600, n: 70, counts: []int{0, 37, 1, 100, 0, 5}},
		{k: 600, n: 70, counts: []int{0, 37, 1, 100, 0, 5}, transB: true},
		{k: 33, n: 1024, counts: []int{9, 0, 60}},
		{k: 1100, n: 24, counts: []int{3, 2, 0}, transB: true},
	}
}

// groupedRef is GroupedMatMul as a composition of MatMul per expert over Narrow and
// Concat: the independent reference its values and gradients are tested against.
func groupedRef(x, w *tensor.Tensor, c groupedCase) *tensor.Tensor {
	var parts []*tensor.Tensor
	row := 0
	for e, n := range c.counts {
		if n == 0 {
			continue
		}
		we := w.Narrow(0, e, 1).Reshape(w.Shape()[1], w.Shape()[2])
		parts = append(parts, tensor.MatMulT(x.Narrow(0, row, n), we, false, c.transB))
		row += n
	}
	return tensor.Concat(0, parts...)
}

func randTensor(dev *tensor.Device, r *rand.Rand, dt tensor.DType, shape []int) *tensor.Tensor {
	n := 1
	for _, s := range shape {
		n *= s
	}
	return tensor.FromSlice(dev, randVals(r, n, -1, 1), shape...).Cast(dt)
}

// TestGroupedMatMulRowsMatchMatMul: each row of GroupedMatMul equals, bit for bit, MatMul
// of that row alone with its expert's matrix.
func TestGroupedMatMulRowsMatchMatMul(t *testing.T) {
	dev := tensor.NewCPU()
	r := rand.New(rand.NewPCG(5, 6))
	for _, c := range groupedCases() {
		x, w := c.operands(dev, r, tensor.F32)
		ws := w.Shape()
		got := tensor.ToSlice[float32](tensor.GroupedMatMul(x, w, c.counts, c.transB))
		row := 0
		for e, n := range c.counts {
			we := w.Narrow(0, e, 1).Reshape(ws[1], ws[2])
			for i := row; i < row+n; i++ {
				want := tensor.ToSlice[float32](tensor.MatMulT(x.Narrow(0, i, 1), we, false, c.transB))
				if !slices.Equal(got[i*c.n:(i+1)*c.n], want) {
					t.Errorf("%v: row %d (expert %d) differs from MatMul of the row alone", c, i, e)
				}
			}
			row += n
		}
	}
}

// TestGroupedMatMulGradsMatchComposition: the gradients of x and w equal those of the
// per-expert MatMul composition (F32, up to rounding; zero for an expert without rows).
func TestGroupedMatMulGradsMatchComposition(t *testing.T) {
	dev := tensor.NewCPU()
	r := rand.New(rand.NewPCG(7, 8))
	for _, c := range groupedCases() {
		x0, w0 := c.operands(dev, r, tensor.F32)
		T := x0.Shape()[0]
		R := randTensor(dev, r, tensor.F32, []int{T, c.n})
		grads := func(f func(x, w *tensor.Tensor) *tensor.Tensor) (y, gx, gw []float64) {
			x := x0.Clone().SetRequiresGrad(true)
			w := w0.Clone().SetRequiresGrad(true)
			out := f(x, w)
			tensor.Sum(tensor.Mul(out, R)).Backward()
			return tensor.ToSlice[float64](out.Cast(tensor.F64)), tensor.ToSlice[float64](x.Grad().Cast(tensor.F64)), tensor.ToSlice[float64](w.Grad().Cast(tensor.F64))
		}
		y, gx, gw := grads(func(x, w *tensor.Tensor) *tensor.Tensor { return tensor.GroupedMatMul(x, w, c.counts, c.transB) })
		ry, rgx, rgw := grads(func(x, w *tensor.Tensor) *tensor.Tensor { return groupedRef(x, w, c) })
		requireClose(t, ry, y, 1e-5, 1e-5, c.String()+" y")
		requireClose(t, rgx, gx, 1e-5, 1e-5, c.String()+" dx")
		requireClose(t, rgw, gw, 1e-5, 1e-5, c.String()+" dw")
		for e, n := range c.counts {
			if n == 0 {
				size := c.k * c.n
				require.Equal(t, make([]float64, size), gw[e*size:(e+1)*size], "%v: dw of expert %d without rows", c, e)
			}
		}
	}
}

// TestGroupedMatMulGradCheck checks GroupedMatMul's gradients against F64 central
// differences.
func TestGroupedMatMulGradCheck(t *testing.T) {
	dev := tensor.NewCPU()
	r := rand.New(rand.NewPCG(9, 10))
	for _, transB := range []bool{false, true} {
		c := groupedCase{k: 5, n: 4, counts: []int{2, 0, 3, 1}, transB: transB}
		x, w := c.operands(dev, r, tensor.F64)
		gradCheck(t, func(in []*tensor.Tensor) *tensor.Tensor {
			return tensor.GroupedMatMul(in[0], in[1], c.counts, c.transB)
		}, x, w)
	}
}
