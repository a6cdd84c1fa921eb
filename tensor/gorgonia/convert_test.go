package gorgonia

import (
	"testing"

	"github.com/stretchr/testify/require"
	gtensor "gorgonia.org/tensor"

	"megago/tensor"
)

func TestToDense(t *testing.T) {
	dev := tensor.NewCPU()
	// Every value is exact in bf16 and f16, so the widened float32 values are known exactly.
	vals := []float64{1.5, -2.25, 0, 3, -0.5, 8}
	tests := []struct {
		name  string
		in    *tensor.Tensor
		dtype gtensor.Dtype
		shape gtensor.Shape
		data  any
	}{
		{"f64", tensor.FromSlice(dev, vals, 2, 3), gtensor.Float64, gtensor.Shape{2, 3}, vals},
		{"f32", tensor.FromSlice(dev, vals, 3, 2).Cast(tensor.F32), gtensor.Float32, gtensor.Shape{3, 2},
			[]float32{1.5, -2.25, 0, 3, -0.5, 8}},
		{"bf16", tensor.FromSlice(dev, vals, 6).Cast(tensor.BF16), gtensor.Float32, gtensor.Shape{6},
			[]float32{1.5, -2.25, 0, 3, -0.5, 8}},
		{"f16", tensor.FromSlice(dev, vals, 1, 2, 3).Cast(tensor.F16), gtensor.Float32, gtensor.Shape{1, 2, 3},
			[]float32{1.5, -2.25, 0, 3, -0.5, 8}},
		{"i32", tensor.FromSlice(dev, []int32{4, -5, 6, 7}, 2, 2), gtensor.Int32, gtensor.Shape{2, 2},
			[]int32{4, -5, 6, 7}},
		{"i64", tensor.FromSlice(dev, []int64{1 << 40, -3}, 2), gtensor.Int64, gtensor.Shape{2},
			[]int64{1 << 40, -3}},
		{"scalar", tensor.Scalar(dev, tensor.F64, 2.5), gtensor.Float64, gtensor.ScalarShape(), 2.5},
		{"scalar-i64", tensor.Scalar(dev, tensor.I64, -7), gtensor.Int64, gtensor.ScalarShape(), int64(-7)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := ToDense(tc.in)
			require.Equal(t, tc.dtype, d.Dtype())
			require.Equal(t, tc.shape, d.Shape())
			require.Equal(t, tc.data, d.Data())
		})
	}
}

func TestToDenseCopies(t *testing.T) {
	dev := tensor.NewCPU()
	x := tensor.FromSlice(dev, []float64{1, 2, 3, 4}, 2, 2)
	d := ToDense(x)
	x.Release() // the dense tensor owns its own copy
	require.Equal(t, []float64{1, 2, 3, 4}, d.Data())
}

func TestToDenseEmptyPanics(t *testing.T) {
	dev := tensor.NewCPU()
	require.PanicsWithValue(t, "gorgonia: ToDense: float64 [0 3] has no elements", func() {
		ToDense(tensor.Zeros(dev, tensor.F64, 0, 3))
	})
}

// transposed returns the 2×3 matrix [[0 1 2] [3 4 5]] stored as its transpose with a
// thunked (lazy) transpose on top.
func transposed() *gtensor.Dense {
	d := gtensor.New(gtensor.WithShape(3, 2), gtensor.WithBacking([]float64{0, 3, 1, 4, 2, 5}))
	if err := d.T(); err != nil {
		panic(err)
	}
	return d
}

func slicedDense(t *testing.T, d *gtensor.Dense, s ...gtensor.Slice) *gtensor.Dense {
	t.Helper()
	v, err := d.Slice(s...)
	require.NoError(t, err)
	return v.(*gtensor.Dense)
}

// steps returns [0, 1, ..., n-1].
func steps(n int) []float64 {
	s := make([]float64, n)
	for i := range s {
		s[i] = float64(i)
	}
	return s
}

// requireShape compares shapes by their sizes (a 0-dim shape may be nil or empty).
func requireShape(t *testing.T, want, got tensor.Shape) {
	t.Helper()
	require.Truef(t, want.Equal(got), "shape %v, want %v", got, want)
}

func TestFromDense(t *testing.T) {
	dev := tensor.NewCPU()
	grid := func() *gtensor.Dense { // [[0 1 2] [3 4 5] [6 7 8]]
		return gtensor.New(gtensor.WithShape(3, 3), gtensor.WithBacking([]float64{0, 1, 2, 3, 4, 5, 6, 7, 8}))
	}
	tests := []struct {
		name  string
		in    *gtensor.Dense
		dtype tensor.DType
		shape tensor.Shape
		want  []float64
	}{
		{"float64", grid(), tensor.F64, tensor.Shape{3, 3}, []float64{0, 1, 2, 3, 4, 5, 6, 7, 8}},
		{"float32", gtensor.New(gtensor.WithShape(2, 2), gtensor.WithBacking([]float32{1.5, 2, 3, 4})),
			tensor.F32, tensor.Shape{2, 2}, []float64{1.5, 2, 3, 4}},
		{"int32", gtensor.New(gtensor.WithShape(3), gtensor.WithBacking([]int32{1, -2, 3})),
			tensor.I32, tensor.Shape{3}, []float64{1, -2, 3}},
		{"int64", gtensor.New(gtensor.WithShape(1, 2), gtensor.WithBacking([]int64{5, 6})),
			tensor.I64, tensor.Shape{1, 2}, []float64{5, 6}},
		{"int", gtensor.New(gtensor.WithShape(2), gtensor.WithBacking([]int{-9, 9})),
			tensor.I64, tensor.Shape{2}, []float64{-9, 9}},
		{"scalar", gtensor.New(gtensor.FromScalar(4.25)), tensor.F64, tensor.Shape{}, []float64{4.25}},
		{"transposed", transposed(), tensor.F64, tensor.Shape{2, 3}, []float64{0, 1, 2, 3, 4, 5}},
		{"column-major", gtensor.New(gtensor.WithShape(2, 3), gtensor.WithBacking([]float64{0, 3, 1, 4, 2, 5}), gtensor.AsFortran(nil)),
			tensor.F64, tensor.Shape{2, 3}, []float64{0, 1, 2, 3, 4, 5}},
		{"row-slice", slicedDense(t, grid(), gtensor.S(1, 3)), tensor.F64, tensor.Shape{2, 3},
			[]float64{3, 4, 5, 6, 7, 8}},
		{"column-slice", slicedDense(t, grid(), nil, gtensor.S(1, 3)), tensor.F64, tensor.Shape{3, 2},
			[]float64{1, 2, 4, 5, 7, 8}},
		{"strided-slice", slicedDense(t, gtensor.New(gtensor.WithShape(4, 4), gtensor.WithBacking(steps(16))),
			gtensor.S(0, 4, 2), gtensor.S(1, 4, 2)), tensor.F64, tensor.Shape{2, 2}, []float64{1, 3, 9, 11}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := FromDense(dev, tc.in)
			require.NoError(t, err)
			require.Equal(t, tc.dtype, got.DType())
			requireShape(t, tc.shape, got.Shape())
			require.Equal(t, tc.want, tensor.ToSlice[float64](got))
		})
	}
}

func TestFromDenseCopies(t *testing.T) {
	dev := tensor.NewCPU()
	backing := []float64{1, 2, 3, 4}
	got, err := FromDense(dev, gtensor.New(gtensor.WithShape(2, 2), gtensor.WithBacking(backing)))
	require.NoError(t, err)
	backing[0] = 99 // the tensor holds its own copy
	require.Equal(t, []float64{1, 2, 3, 4}, tensor.ToSlice[float64](got))
}

func TestFromDenseUnsupported(t *testing.T) {
	dev := tensor.NewCPU()
	tests := []struct {
		name string
		in   *gtensor.Dense
		want string
	}{
		{"bool", gtensor.New(gtensor.WithShape(2), gtensor.WithBacking([]bool{true, false})), "dtype bool"},
		{"uint8", gtensor.New(gtensor.WithShape(2), gtensor.WithBacking([]uint8{1, 2})), "dtype uint8"},
		{"complex128", gtensor.New(gtensor.WithShape(1), gtensor.WithBacking([]complex128{1i})), "dtype complex128"},
		{"nil", nil, "nil dense tensor"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := FromDense(dev, tc.in)
			require.Nil(t, got)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestRoundTrip(t *testing.T) {
	dev := tensor.NewCPU()
	rng := tensor.NewRNG(1).Named("roundtrip")
	tests := []struct {
		name string
		in   *tensor.Tensor
	}{
		{"f64", rng.Normal(dev, tensor.F64, tensor.Whole(2, 3, 4), 0, 1)},
		{"f32", rng.Normal(dev, tensor.F32, tensor.Whole(5, 7), 0, 1)},
		{"i32", tensor.FromSlice(dev, []int32{3, 1, 4, 1, 5, 9}, 3, 2)},
		{"i64", tensor.Arange(dev, tensor.I64, -4, 3, 5)},
		{"scalar", tensor.Scalar(dev, tensor.F64, -1.25)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := FromDense(dev, ToDense(tc.in))
			require.NoError(t, err)
			require.Equal(t, tc.in.DType(), got.DType())
			requireShape(t, tc.in.Shape(), got.Shape())
			require.Equal(t, tensor.ToSlice[float64](tc.in), tensor.ToSlice[float64](got))
		})
	}
}
