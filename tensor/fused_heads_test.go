package tensor_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"megago/internal/testutil"
	"megago/tensor"
)

// headsCase is one SplitHeads geometry: B, T, G groups of per query heads, head size HS.
type headsCase struct {
	b, t, g, per, hs int
	bias             bool
}

func headsCases() []headsCase {
	return []headsCase{
		{b: 2, t: 5, g: 3, per: 1, hs: 7, bias: true},    // multi-head, odd sizes (vector tails)
		{b: 1, t: 4, g: 2, per: 3, hs: 20},               // grouped-query, no bias
		{b: 2, t: 300, g: 2, per: 2, hs: 16, bias: true}, // enough rows to run in parallel
		{b: 3, t: 70, g: 1, per: 4, hs: 33, bias: true},  // one group
		{b: 2, t: 256, g: 4, per: 1, hs: 64, bias: true}, // W2's layer
		{b: 1, t: 1, g: 1, per: 1, hs: 1, bias: true},    // smallest
	}
}

// leaves returns the case's projection [B, T, G·(per+2)·HS] and bias (or nil), requiring
// grad, in dtype dt.
func (c headsCase) leaves(dev *tensor.Device, dt tensor.DType, seed uint64) (qkv, bias *tensor.Tensor) {
	r := rand.New(rand.NewPCG(seed, 9))
	w := c.g * (c.per + 2) * c.hs
	qkv = fromF64(dev, uni(-2, 2).fill(r, c.b*c.t*w), c.b, c.t, w).Cast(dt).SetRequiresGrad(true)
	if c.bias {
		bias = fromF64(dev, uni(-1, 1).fill(r, w), w).Cast(dt).SetRequiresGrad(true)
	}
	return qkv, bias
}

// TestSplitHeads: SplitHeads's heads equal a loop over the documented layout (q[b, g·per+j,
// t] is slot j of group g at (b, t), k slot per, v slot per+1, each plus its bias), and
// its outputs and gradients equal SplitHeadsReference's bit for bit, in F32 (the fused
// kernel) and F64 (the composition).
func TestSplitHeads(t *testing.T) {
	testutil.ForEachBackend(t, func(t *testing.T, dev *tensor.Device) {
		for i, c := range headsCases() {
			for _, dt := range []tensor.DType{tensor.F32, tensor.F64} {
				t.Run(fmt.Sprintf("%+v/%v", c, dt), func(t *testing.T) {
					qkv, bias := c.leaves(dev, dt, uint64(i))
					q, k, v := tensor.SplitHeads(qkv, bias, c.g, c.hs)
					c.requireLayout(t, qkv, bias, q, k, v)
					got, gotG := runRows(func(xs []*tensor.Tensor) []*tensor.Tensor {
						q, k, v := tensor.SplitHeads(xs[0], at(xs, 1), c.g, c.hs)
						return outs(q, k, v)
					}, nonNil(c.leaves(dev, dt, uint64(i))))
					want, wantG := runRows(func(xs []*tensor.Tensor) []*tensor.Tensor {
						q, k, v := tensor.SplitHeadsReference(xs[0], at(xs, 1), c.g, c.hs)
						return outs(q, k, v)
					}, nonNil(c.leaves(dev, dt, uint64(i))))
					require.Equal(t, want, got, "outputs")
					require.Equal(t, wantG, gotG, "gradients")
				})
			}
		}
	})
}

// requireLayout checks q, k, v against the layout, element by element.
func (c headsCase) requireLayout(t *testing.T, qkv, bias, q, k, v *tensor.Tensor) {
	t.Helper()
	x := tensor.ToSlice[float64](qkv)
	var bs []float64
	if bias != nil {
		bs = tensor.ToSlice[float64](bias)
	}
	want := [3][]float64{make([]float64, q.Numel()), make([]float64, k.Numel()), make([]float64, v.Numel())}
	w := c.g * (c.per + 2) * c.hs
	for b := range c.b {
		for tt := range c.t {
			for g := range c.g {
				for j := range c.per + 2 {
					for e := range c.hs {
						s := (g*(c.per+2)+j)*c.hs + e
						y := x[(b*c.t+tt)*w+s]
						if bs != nil && qkv.DType() == tensor.F32 {
							y = float64(float32(y) + float32(bs[s]))
						} else if bs != nil {
							y += bs[s]
						}
						switch {
						case j < c.per:
							want[0][((b*c.g*c.per+g*c.per+j)*c.t+tt)*c.hs+e] = y
						case j == c.per:
							want[1][((b*c.g+g)*c.t+tt)*c.hs+e] = y
						default:
							want[2][((b*c.g+g)*c.t+tt)*c.hs+e] = y
						}
					}
				}
			}
		}
	}
	for i, h := range []*tensor.Tensor{q, k, v} {
		require.Equal(t, want[i], tensor.ToSlice[float64](h), "q, k, v [%d]", i)
	}
}

// nonNil returns the non-nil tensors of ts.
func nonNil(ts ...*tensor.Tensor) []*tensor.Tensor {
	var out []*tensor.Tensor
	for _, t := range ts {
		if t != nil {
			out = append(out, t)
		}
	}
	return out
}

// at returns xs[i], or nil past its end.
func at(xs []*tensor.Tensor, i int) *tensor.Tensor {
	if i < len(xs) {
		return xs[i]
	}
	return nil
}
