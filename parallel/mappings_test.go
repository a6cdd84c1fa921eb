package parallel

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"megago/tensor"
)

// Each mapping is checked forward and backward against values computed here from the
// definitions in MEGATRON-FACTS.md, on 1, 2, 3, 4 and 8 ranks.

var mappingRanks = []int{1, 2, 3, 4, 8}

// val is a distinct, exactly representable value for element i of rank r's tensor of kind k.
func val(k, r, i int) float64 { return float64(k*100000+r*1000+i) / 8 }

// ranked returns rank r's [B, T, C] tensor of kind k, requiring grad.
func ranked(dev *tensor.Device, k, r int, shape ...int) *tensor.Tensor {
	n := tensor.Shape(shape).Numel()
	v := make([]float64, n)
	for i := range v {
		v[i] = val(k, r, i)
	}
	return tensor.FromSlice(dev, v, shape...).SetRequiresGrad(true)
}

// block returns the elements of full (row-major, shape) whose index along dim lies in
// [lo, hi), as a row-major slice.
func block(full []float64, shape []int, dim, lo, hi int) []float64 {
	outer, n, inner := tensor.Shape(shape).Split3(dim)
	var out []float64
	for o := 0; o < outer; o++ {
		out = append(out, full[(o*n+lo)*inner:(o*n+hi)*inner]...)
	}
	return out
}

// concatAlong joins row-major parts of shape part along dim.
func concatAlong(parts [][]float64, part []int, dim int) []float64 {
	outer, n, inner := tensor.Shape(part).Split3(dim)
	var out []float64
	for o := 0; o < outer; o++ {
		for _, p := range parts {
			out = append(out, p[o*n*inner:(o+1)*n*inner]...)
		}
	}
	return out
}

func values(k, r, n int) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = val(k, r, i)
	}
	return v
}

func equalValues(what string, got *tensor.Tensor, want []float64) error {
	g := tensor.ToSlice[float64](got)
	if len(g) != len(want) {
		return fmt.Errorf("%s: %d values, want %d", what, len(g), len(want))
	}
	for i := range g {
		if g[i] != want[i] {
			return fmt.Errorf("%s: element %d is %v, want %v", what, i, g[i], want[i])
		}
	}
	return nil
}

func TestMappings(t *testing.T) {
	type ctx struct {
		c    Comm
		dev  *tensor.Device
		n, r int
	}
	cases := []struct {
		name string
		run  func(x ctx) error
	}{
		{"CopyToTP", func(x ctx) error {
			shape := []int{2, 3, 4}
			in := ranked(x.dev, 1, 0, shape...) // the same on every rank
			y := CopyToTP(bg, x.c, in)
			if err := equalValues("forward", y, values(1, 0, 24)); err != nil {
				return err
			}
			y.BackwardWithGrad(ranked(x.dev, 2, x.r, shape...).Detach())
			want := make([]float64, 24)
			for s := 0; s < x.n; s++ {
				for i, v := range values(2, s, 24) {
					want[i] += v
				}
			}
			return equalValues("grad", in.Grad(), want)
		}},
		{"ReduceFromTP", func(x ctx) error {
			shape := []int{2, 3, 4}
			in := ranked(x.dev, 1, x.r, shape...)
			y := ReduceFromTP(bg, x.c, in)
			want := make([]float64, 24)
			for s := 0; s < x.n; s++ {
				for i, v := range values(1, s, 24) {
					want[i] += v
				}
			}
			if err := equalValues("forward", y, want); err != nil {
				return err
			}
			y.BackwardWithGrad(ranked(x.dev, 2, x.r, shape...).Detach())
			return equalValues("grad", in.Grad(), values(2, x.r, 24))
		}},
		{"ScatterToTP", func(x ctx) error { return checkScatter(x.c, x.dev, x.n, x.r, 2, ScatterToTP) }},
		{"ScatterToSP", func(x ctx) error { return checkScatter(x.c, x.dev, x.n, x.r, 1, ScatterToSP) }},
		{"GatherFromTP", func(x ctx) error {
			part := []int{2, 3, 2}
			in := ranked(x.dev, 1, x.r, part...)
			y := GatherFromTP(bg, x.c, in)
			parts := make([][]float64, x.n)
			for s := range parts {
				parts[s] = values(1, s, 12)
			}
			if err := equalValues("forward", y, concatAlong(parts, part, 2)); err != nil {
				return err
			}
			gy := ranked(x.dev, 2, 0, 2, 3, 2*x.n).Detach() // the same on every rank
			y.BackwardWithGrad(gy)
			return equalValues("grad", in.Grad(), block(values(2, 0, 12*x.n), []int{2, 3, 2 * x.n}, 2, 2*x.r, 2*x.r+2))
		}},
		{"GatherFromSP", func(x ctx) error {
			part := []int{2, 2, 3}
			full := []int{2, 2 * x.n, 3}
			in := ranked(x.dev, 1, x.r, part...)
			y := GatherFromSP(bg, x.c, in)
			parts := make([][]float64, x.n)
			for s := range parts {
				parts[s] = values(1, s, 12)
			}
			if err := equalValues("forward", y, concatAlong(parts, part, 1)); err != nil {
				return err
			}
			y.BackwardWithGrad(ranked(x.dev, 2, x.r, full...).Detach())
			want := make([]float64, 12) // Σ over ranks of their gradient's chunk r
			for s := 0; s < x.n; s++ {
				for i, v := range block(values(2, s, 12*x.n), full, 1, 2*x.r, 2*x.r+2) {
					want[i] += v
				}
			}
			return equalValues("grad", in.Grad(), want)
		}},
		{"ReduceScatterToSP", func(x ctx) error {
			full := []int{2, 2 * x.n, 3}
			part := []int{2, 2, 3}
			in := ranked(x.dev, 1, x.r, full...)
			y := ReduceScatterToSP(bg, x.c, in)
			want := make([]float64, 12)
			for s := 0; s < x.n; s++ {
				for i, v := range block(values(1, s, 12*x.n), full, 1, 2*x.r, 2*x.r+2) {
					want[i] += v
				}
			}
			if err := equalValues("forward", y, want); err != nil {
				return err
			}
			y.BackwardWithGrad(ranked(x.dev, 2, x.r, part...).Detach())
			parts := make([][]float64, x.n)
			for s := range parts {
				parts[s] = values(2, s, 12)
			}
			return equalValues("grad", in.Grad(), concatAlong(parts, part, 1))
		}},
	}
	for _, tc := range cases {
		for _, n := range mappingRanks {
			t.Run(fmt.Sprintf("%s/%d", tc.name, n), func(t *testing.T) {
				require.NoError(t, RunLocal(n, func(c Comm) error {
					return tc.run(ctx{c: c, dev: tensor.NewCPU(), n: n, r: c.Rank()})
				}))
			})
		}
	}
}

// checkScatter checks a scatter mapping along dim: forward keeps chunk r of a tensor
// that is the same on all ranks, backward all-gathers the ranks' gradients.
func checkScatter(c Comm, dev *tensor.Device, n, r, dim int, f func(context.Context, Comm, *tensor.Tensor) *tensor.Tensor) error {
	full := []int{2, 3, 3}
	full[dim] = 2 * n
	part := append([]int(nil), full...)
	part[dim] = 2
	numel := tensor.Shape(full).Numel()
	in := ranked(dev, 1, 0, full...)
	y := f(bg, c, in)
	if err := equalValues("forward", y, block(values(1, 0, numel), full, dim, 2*r, 2*r+2)); err != nil {
		return err
	}
	y.BackwardWithGrad(ranked(dev, 2, r, part...).Detach())
	parts := make([][]float64, n)
	for s := range parts {
		parts[s] = values(2, s, numel/n)
	}
	return equalValues("grad", in.Grad(), concatAlong(parts, part, dim))
}

func TestReduceFromTPCheckValue(t *testing.T) {
	// MEGATRON-FACTS check value: TP=4 groups of 8 ranks, reduce from TP on ones·rank
	// gives 6 on ranks 0-3 and 22 on ranks 4-7.
	got := make([]float64, 8)
	require.NoError(t, RunLocal(8, func(world Comm) error {
		tp, err := world.Split(bg, "tp", world.Rank()/4, world.Rank())
		if err != nil {
			return err
		}
		x := tensor.Full(tensor.NewCPU(), tensor.F32, float64(world.Rank()), 2, 3)
		y := ReduceFromTP(bg, tp, x)
		for _, v := range tensor.ToSlice[float64](y) {
			if v != tensor.ToSlice[float64](y)[0] {
				return fmt.Errorf("uneven result %v", tensor.ToSlice[float64](y))
			}
		}
		got[world.Rank()] = tensor.ToSlice[float64](y)[0]
		return nil
	}))
	assert.Equal(t, []float64{6, 6, 6, 6, 22, 22, 22, 22}, got)
}

func TestMappingsPanicOnIndivisibleSizes(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    func(c Comm, x *tensor.Tensor) *tensor.Tensor
		want string
	}{
		{"ScatterToTP", func(c Comm, x *tensor.Tensor) *tensor.Tensor { return ScatterToTP(bg, c, x) }, "parallel: ScatterToTP: dim 2 of [2 6 10] (size 10) not divisible by group world size 4"},
		{"ScatterToSP", func(c Comm, x *tensor.Tensor) *tensor.Tensor { return ScatterToSP(bg, c, x) }, "parallel: ScatterToSP: dim 1 of [2 6 10] (size 6) not divisible by group world size 4"},
		{"ReduceScatterToSP", func(c Comm, x *tensor.Tensor) *tensor.Tensor { return ReduceScatterToSP(bg, c, x) }, "dim 1 of [2 6 10] not divisible by group world size 4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := RunLocal(4, func(c Comm) error {
				tc.f(c, tensor.Zeros(tensor.NewCPU(), tensor.F32, 2, 6, 10))
				return nil
			})
			require.Error(t, err)
			assert.True(t, strings.Contains(err.Error(), tc.want), err.Error())
		})
	}
}

func TestMappingsAreIdentityOnOneRank(t *testing.T) {
	require.NoError(t, RunLocal(1, func(c Comm) error {
		x := tensor.Ones(tensor.NewCPU(), tensor.F32, 2, 3, 4)
		for _, f := range []func() *tensor.Tensor{
			func() *tensor.Tensor { return CopyToTP(bg, c, x) },
			func() *tensor.Tensor { return ReduceFromTP(bg, c, x) },
			func() *tensor.Tensor { return ScatterToTP(bg, c, x) },
			func() *tensor.Tensor { return GatherFromTP(bg, c, x) },
			func() *tensor.Tensor { return ScatterToSP(bg, c, x) },
			func() *tensor.Tensor { return GatherFromSP(bg, c, x) },
			func() *tensor.Tensor { return ReduceScatterToSP(bg, c, x) },
		} {
			if y := f(); y != x {
				return fmt.Errorf("not the identity")
			}
		}
		return nil
	}))
}
