package optim

import (
	"context"
	"fmt"
	"math"

	"megago/nn/param"
	"megago/parallel"
	"megago/tensor"
)

// GradNorm returns the global L2 norm of the gradients of params (p.Grad(); parameters
// without one are skipped), summed over g.MP with every element counted once: a
// TP-replicated parameter on TP rank 0 only, the Shared copy of a tied embedding never.
// Expert parameters are summed over g.ExpertMP instead, one replicated over expert-TP
// counted on expert-TP rank 0, when the expert groups are set (see Groups). The sum of
// squares is taken in float64. Every rank of g.MP (and g.ExpertMP) must call it.
func GradNorm(ctx context.Context, params []*param.Param, g Groups) (float64, error) {
	separate := g.separateExperts()
	g = g.withDefaults()
	var dense, expert float64
	var dev *tensor.Device
	for _, p := range params {
		grad := p.Grad()
		tp := g.TP
		if p.Expert {
			tp = g.ExpertTP
		}
		if grad == nil || !countsTowardNorm(p, tp.Rank()) {
			continue
		}
		dev = grad.Device()
		dst := tensor.Empty(dev, tensor.F64, 1)
		dev.Backend().SumSquares(dst.Span(), grad.Span(), [][2]int{{0, grad.Numel()}})
		if p.Expert && separate {
			expert += dst.Item()
		} else {
			dense += dst.Item()
		}
		dst.Release()
	}
	if dev == nil { // no gradient here, but the other ranks may wait for this one
		dev = tensor.NewCPU()
	}
	sum, err := sumOver(ctx, dev, dense, g.MP)
	if err == nil && separate {
		expert, err = sumOver(ctx, dev, expert, g.ExpertMP)
		sum += expert
	}
	return math.Sqrt(sum), err
}

// sumOver all-reduces v over c (SUM).
func sumOver(ctx context.Context, dev *tensor.Device, v float64, c parallel.Comm) (float64, error) {
	if c.Size() == 1 {
		return v, nil
	}
	t := tensor.Scalar(dev, tensor.F64, v)
	defer t.Release()
	if err := c.AllReduce(ctx, t, parallel.Sum); err != nil {
		return 0, fmt.Errorf("optim: gradient norm over %s: %w", c.Name(), err)
	}
	return t.Item(), nil
}

// ClipGradNorm scales the gradients of params so that their global norm (GradNorm) is
// at most maxNorm: by maxNorm/(norm + 1e-6) when that is below 1, as Megatron and
// torch.nn.utils.clip_grad_norm_ do. It returns the norm before clipping; a non-finite
// norm leaves the gradients unchanged. The Optimizer clips inside Step (Config.ClipGrad)
// without this separate pass.
func ClipGradNorm(ctx context.Context, params []*param.Param, maxNorm float64, g Groups) (float64, error) {
	norm, err := GradNorm(ctx, params, g)
	if err != nil {
		return 0, err
	}
	coeff := maxNorm / (norm + clipEps)
	if math.IsInf(norm, 0) || math.IsNaN(norm) || coeff >= 1 {
		return norm, nil
	}
	for _, p := range params {
		if grad := p.Grad(); grad != nil {
			grad.Device().Backend().Unary(tensor.OpMulScalar, grad.Span(), grad.Span(), coeff)
		}
	}
	return norm, nil
}
