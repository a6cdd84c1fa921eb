package optim

import (
	"fmt"
	"math"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"megago/internal/testutil"
	"megago/tensor"
)

// The backend's optimizer kernels against slow, obvious float64 references, on every
// backend, for each gradient and model dtype.

// kernelData returns n values in (-2, 2) that differ per seed.
func kernelData(n, seed int) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = 2 * math.Sin(float64(i*7+seed*13)+0.5)
	}
	return v
}

// kernelSegs covers [1, n−3) in three segments with different rates, leaving gaps.
func kernelSegs(n int) []tensor.OptimSegment {
	a, b := n/3, 2*n/3
	return []tensor.OptimSegment{
		{Off: 1, N: a - 1, LR: 0.01, WeightDecay: 0.1},
		{Off: a, N: b - a - 2, LR: 0.02},
		{Off: b, N: n - 3 - b, LR: 0.005, WeightDecay: 0.3},
	}
}

func TestAdamStepKernel(t *testing.T) {
	const n = 5000 // several chunks
	testutil.ForEachBackend(t, func(t *testing.T, dev *tensor.Device) {
		for _, gdt := range []tensor.DType{tensor.F32, tensor.BF16, tensor.F16} {
			for _, mdt := range []tensor.DType{0, tensor.BF16, tensor.F16} {
				for _, decoupled := range []bool{true, false} {
					t.Run(fmt.Sprintf("grad-%v/model-%v/decoupled-%v", gdt, mdt, decoupled), func(t *testing.T) {
						p0, g0, m0 := kernelData(n, 1), kernelData(n, 2), kernelData(n, 3)
						v0 := kernelData(n, 4)
						for i := range v0 {
							v0[i] *= v0[i]
						}
						param := tensor.FromSlice(dev, p0).Cast(tensor.F32)
						grad := tensor.FromSlice(dev, g0).Cast(gdt)
						m, v := tensor.FromSlice(dev, m0).Cast(tensor.F32), tensor.FromSlice(dev, v0).Cast(tensor.F32)
						var model *tensor.Tensor
						if mdt != 0 {
							model = tensor.Zeros(dev, mdt, n)
						}
						ap := tensor.AdamParams{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, BiasCorrection1: 1 - math.Pow(0.9, 3),
							BiasCorrection2: 1 - math.Pow(0.95, 3), Decoupled: decoupled, GradScale: 0.5}
						segs := kernelSegs(n)
						dev.Backend().AdamStep(ap, segs, param.Span(), grad.Span(), m.Span(), v.Span(), spanOf(model))

						gs := tensor.ToSlice[float64](grad) // as the kernel read them
						wp, wm, wv := append([]float64(nil), p0...), append([]float64(nil), m0...), append([]float64(nil), v0...)
						for i := range wp {
							wp[i], wm[i], wv[i] = float64(float32(wp[i])), float64(float32(wm[i])), float64(float32(wv[i]))
						}
						for _, s := range segs {
							for i := s.Off; i < s.Off+s.N; i++ {
								g := gs[i] * ap.GradScale
								if decoupled {
									wp[i] *= 1 - s.LR*s.WeightDecay
								} else {
									g += s.WeightDecay * wp[i]
								}
								wm[i] = ap.Beta1*wm[i] + (1-ap.Beta1)*g
								wv[i] = ap.Beta2*wv[i] + (1-ap.Beta2)*g*g
								wp[i] -= s.LR / ap.BiasCorrection1 * wm[i] / (math.Sqrt(wv[i])/math.Sqrt(ap.BiasCorrection2) + ap.Eps)
							}
						}
						// float32 arithmetic against the float64 reference.
						require.InDeltaSlice(t, wp, tensor.ToSlice[float64](param), 2e-6)
						require.InDeltaSlice(t, wm, tensor.ToSlice[float64](m), 2e-6)
						require.InDeltaSlice(t, wv, tensor.ToSlice[float64](v), 2e-6)
						if model != nil {
							got := tensor.ToSlice[float64](model)
							want := tensor.ToSlice[float64](param.Cast(mdt))
							for _, s := range segs {
								require.Equal(t, want[s.Off:s.Off+s.N], got[s.Off:s.Off+s.N], "model is the rounded master")
							}
							require.Zero(t, got[0], "gap left alone")
							require.Zero(t, got[n-1], "gap left alone")
						}
					})
				}
			}
		}
	})
}

func TestSGDStepKernel(t *testing.T) {
	const n = 3000
	testutil.ForEachBackend(t, func(t *testing.T, dev *tensor.Device) {
		for _, tc := range []tensor.SGDParams{
			{GradScale: 1},
			{Momentum: 0.9, First: true, GradScale: 2},
			{Momentum: 0.9, Dampening: 0.1, GradScale: 1},
			{Momentum: 0.8, Nesterov: true, GradScale: 0.25},
		} {
			for _, gdt := range []tensor.DType{tensor.F64, tensor.BF16} {
				t.Run(fmt.Sprintf("%+v/grad-%v", tc, gdt), func(t *testing.T) {
					p0, g0, b0 := kernelData(n, 5), kernelData(n, 6), kernelData(n, 7)
					param, grad, buf := tensor.FromSlice(dev, p0), tensor.FromSlice(dev, g0).Cast(gdt), tensor.FromSlice(dev, b0)
					model := tensor.Zeros(dev, tensor.F16, n)
					segs := kernelSegs(n)
					var bs tensor.Span
					if tc.Momentum != 0 {
						bs = buf.Span()
					}
					dev.Backend().SGDStep(tc, segs, param.Span(), grad.Span(), bs, model.Span())

					gs := tensor.ToSlice[float64](grad)
					wp, wb := append([]float64(nil), p0...), append([]float64(nil), b0...)
					for _, s := range segs {
						for i := s.Off; i < s.Off+s.N; i++ {
							g := gs[i]*tc.GradScale + s.WeightDecay*wp[i]
							d := g
							if tc.Momentum != 0 {
								if tc.First {
									wb[i] = g
								} else {
									wb[i] = tc.Momentum*wb[i] + (1-tc.Dampening)*g
								}
								d = wb[i]
								if tc.Nesterov {
									d = g + tc.Momentum*wb[i]
								}
							}
							wp[i] -= s.LR * d
						}
					}
					require.InDeltaSlice(t, wp, tensor.ToSlice[float64](param), 1e-15) // F64 master: same arithmetic
					require.InDeltaSlice(t, wb, tensor.ToSlice[float64](buf), 1e-15)
					require.Equal(t, tensor.ToSlice[float64](param.Cast(tensor.F16))[1], tensor.ToSlice[float64](model)[1])
				})
			}
		}
	})
}

func TestSumSquaresKernel(t *testing.T) {
	const n = 20000 // several blocks
	testutil.ForEachBackend(t, func(t *testing.T, dev *tensor.Device) {
		for _, dt := range []tensor.DType{tensor.F64, tensor.F32, tensor.BF16, tensor.F16} {
			t.Run(dt.String(), func(t *testing.T) {
				x := tensor.FromSlice(dev, kernelData(n, 8)).Cast(dt)
				xs := tensor.ToSlice[float64](x)
				ranges := [][2]int{{0, 1}, {1, 9000}, {9000, 9000}, {9100, n}}
				dst := tensor.Empty(dev, tensor.F64, len(ranges))
				dev.Backend().SumSquares(dst.Span(), x.Span(), ranges)
				got := tensor.ToSlice[float64](dst)
				for i, r := range ranges {
					want := 0.0
					for _, v := range xs[r[0]:r[1]] {
						want += v * v
					}
					require.InDelta(t, want, got[i], 1e-12*max(want, 1), "range %v", r) // float64 sums in another order
				}
			})
		}
		for _, bad := range []float64{math.Inf(-1), math.NaN()} {
			x := tensor.FromSlice(dev, []float64{1, bad, 2, 3})
			dst := tensor.Empty(dev, tensor.F64, 2)
			dev.Backend().SumSquares(dst.Span(), x.Span(), [][2]int{{0, 2}, {2, 4}})
			got := tensor.ToSlice[float64](dst)
			require.False(t, got[0] < math.Inf(1), "non-finite element shows: %v", got[0])
			require.Equal(t, 13.0, got[1])
		}
	})
}

func TestSumSquaresIndependentOfThreads(t *testing.T) {
	dev := tensor.NewCPU()
	x := tensor.FromSlice(dev, kernelData(1<<18, 9)).Cast(tensor.F32)
	run := func(procs int) float64 {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
		dst := tensor.Empty(dev, tensor.F64, 1)
		dev.Backend().SumSquares(dst.Span(), x.Span(), [][2]int{{0, x.Numel()}})
		return dst.Item()
	}
	require.Equal(t, run(1), run(4))
}

func TestAccumulateGradKernel(t *testing.T) {
	testutil.ForEachBackend(t, func(t *testing.T, dev *tensor.Device) {
		for _, tc := range []struct{ main, grad tensor.DType }{
			{tensor.F32, tensor.BF16}, {tensor.F32, tensor.F16}, {tensor.F32, tensor.F32}, {tensor.F64, tensor.BF16},
		} {
			t.Run(fmt.Sprintf("%v+=%v", tc.main, tc.grad), func(t *testing.T) {
				const n = 4100
				main := tensor.FromSlice(dev, kernelData(n, 10)).Cast(tc.main)
				grad := tensor.FromSlice(dev, kernelData(n, 11)).Cast(tc.grad)
				want := tensor.ToSlice[float64](tensor.Add(main, grad.Cast(tc.main)))
				dev.Backend().AccumulateGrad(main.Span(), grad.Span())
				require.Equal(t, want, tensor.ToSlice[float64](main))
				require.Equal(t, make([]float64, n), tensor.ToSlice[float64](grad))
			})
		}
	})
}
