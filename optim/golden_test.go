package optim

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"megago/internal/testutil"
	"megago/nn"
	"megago/tensor"
)

// golden is testdata/optim_golden.json, written by testdata/gen_optim.py.
type golden struct {
	Shapes    map[string][]int       `json:"shapes"`
	Init      map[string][]float64   `json:"init"`
	Grads     []map[string][]float64 `json:"grads"`
	Cases     []goldenCase           `json:"cases"`
	Schedules []goldenSchedule       `json:"schedules"`
}

type goldenCase struct {
	Name      string                 `json:"name"`
	Opt       string                 `json:"opt"`
	LR        float64                `json:"lr"`
	Betas     []float64              `json:"betas"`
	Eps       float64                `json:"eps"`
	WD        float64                `json:"wd"`
	LRMultB   float64                `json:"lr_mult_b"`
	Momentum  float64                `json:"momentum"`
	Dampening float64                `json:"dampening"`
	Nesterov  bool                   `json:"nesterov"`
	Clip      float64                `json:"clip"`
	GradMult  float64                `json:"grad_mult"`
	F32       []map[string][]float64 `json:"float32"`
	F64       []map[string][]float64 `json:"float64"`
	F32Norms  []float64              `json:"float32_norms"`
	F64Norms  []float64              `json:"float64_norms"`
}

type goldenSchedule struct {
	Config map[string]any `json:"config"`
	Steps  []int          `json:"steps"`
	LR     []float64      `json:"lr"`
	WD     []float64      `json:"wd"`
}

func loadGolden(t *testing.T) *golden {
	t.Helper()
	raw, err := os.ReadFile("testdata/optim_golden.json")
	require.NoError(t, err)
	var g golden
	require.NoError(t, json.Unmarshal(raw, &g))
	return &g
}

// goldenParamNames is the order the test builds the golden parameters in.
var goldenParamNames = []string{"w", "b", "x"}

// newTestParam returns a replicated parameter holding vals, marked NoWeightDecay when
// 1-D, as nn marks biases and norm weights.
func newTestParam(dev *tensor.Device, dt tensor.DType, name string, vals []float64, shape ...int) *nn.Param {
	return &nn.Param{Tensor: tensor.FromSlice(dev, vals, shape...).Cast(dt).SetRequiresGrad(true), Name: name,
		GlobalShape: tensor.Shape(shape).Clone(), PartitionDim: -1, PartitionStride: 1, TPReplicated: true,
		NoWeightDecay: len(shape) == 1}
}

func (c goldenCase) rule() Rule {
	var b1, b2 float64
	if len(c.Betas) == 2 {
		b1, b2 = c.Betas[0], c.Betas[1]
	}
	switch c.Opt {
	case "AdamW":
		return AdamW{Beta1: b1, Beta2: b2, Eps: c.Eps}
	case "Adam":
		return Adam{Beta1: b1, Beta2: b2, Eps: c.Eps}
	}
	return SGD{Momentum: c.Momentum, Dampening: c.Dampening, Nesterov: c.Nesterov}
}

// TestMatchesTorchOptim runs each golden case for 20 steps on the same parameters and
// gradients as PyTorch and compares the parameters after every step.
func TestMatchesTorchOptim(t *testing.T) {
	g := loadGolden(t)
	testutil.ForEachBackend(t, func(t *testing.T, dev *tensor.Device) {
		for _, c := range g.Cases {
			for _, tc := range []struct {
				dt    tensor.DType
				want  []map[string][]float64
				norms []float64
				tol   float64
			}{
				// float32: the kernel's operation order is PyTorch's, FMA contraction aside.
				{tensor.F32, c.F32, c.F32Norms, 1e-6},
				{tensor.F64, c.F64, c.F64Norms, 1e-12},
			} {
				t.Run(c.Name+"/"+tc.dt.String(), func(t *testing.T) {
					runGoldenCase(t, dev, g, c, tc.dt, tc.want, tc.norms, tc.tol, false)
				})
				if c.Clip == 0 {
					// Without clipping nothing in the update needs the norm: the same
					// parameters, no norm.
					t.Run(c.Name+"/"+tc.dt.String()+"/skip-norm", func(t *testing.T) {
						runGoldenCase(t, dev, g, c, tc.dt, tc.want, tc.norms, tc.tol, true)
					})
				}
			}
		}
	})
}

// runGoldenCase runs case c in dtype dt and compares the parameters with want and the
// gradient norms with norms (when given), or, with skipNorm (Config.SkipGradNorm),
// checks that there are none.
func runGoldenCase(t *testing.T, dev *tensor.Device, g *golden, c goldenCase, dt tensor.DType,
	want []map[string][]float64, norms []float64, tol float64, skipNorm bool) {
	params := map[string]*nn.Param{}
	var list []*nn.Param
	for _, n := range goldenParamNames {
		p := newTestParam(dev, dt, n, g.Init[n], g.Shapes[n]...)
		params[n] = p
		list = append(list, p)
	}
	lrMultB := c.LRMultB
	if lrMultB == 0 {
		lrMultB = 1
	}
	opt, err := New(list, Config{Rule: c.rule(), LR: c.LR, WeightDecay: c.WD, ClipGrad: c.Clip, SkipGradNorm: skipNorm,
		Multipliers: func(p *nn.Param) Multipliers {
			m := DefaultMultipliers(p)
			if p.Name == "b" {
				m.LR = lrMultB
			}
			return m
		}})
	require.NoError(t, err)
	mult := c.GradMult
	if mult == 0 {
		mult = 1
	}
	ctx := context.Background()
	for step := range want {
		opt.ZeroGrad()
		for _, n := range goldenParamNames {
			gv := make([]float64, len(g.Grads[step][n]))
			for i, v := range g.Grads[step][n] {
				gv[i] = v * mult
			}
			params[n].Grad().CopyFrom(tensor.FromSlice(dev, gv, g.Shapes[n]...))
		}
		res, err := opt.Step(ctx)
		require.NoError(t, err)
		if skipNorm {
			require.True(t, math.IsNaN(res.GradNorm), "step %d norm %v, want NaN", step+1, res.GradNorm)
		} else if norms != nil {
			require.InDelta(t, norms[step], res.GradNorm, tol*norms[step], "step %d norm", step+1)
		}
		for _, n := range goldenParamNames {
			require.InDeltaSlice(t, want[step][n], tensor.ToSlice[float64](params[n].Tensor), tol, "step %d param %s", step+1, n)
		}
	}
	require.Equal(t, len(want), opt.Steps())
}
