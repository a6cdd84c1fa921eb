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
// The sum of squares is taken in float64. Every rank of g.MP must call it.
func GradNorm(ctx context.Context, params []*param.Param, g Groups) (float64, error) {
	g = g.withDefaults()
	sum := 0.0
	var dev *tensor.Device
	for _, p := range params {
		grad := p.Grad()
		if grad == nil || !countsTowardNorm(p, g.TP.Rank()) {
			continue
		}
		dev = grad.Device()
		dst := tensor.Empty(dev, tensor.F64, 1)
		dev.Backend().SumSquares(dst.Span(), grad.Span(), [][2]int{{0, grad.Numel()}})
		sum += dst.Item()
		dst.Release()
	}
	if g.MP.Size() > 1 {
		if dev == nil { // no gradient here, but the other ranks wait for this one
			dev = tensor.NewCPU()
		}
		t := tensor.Scalar(dev, tensor.F64, sum)
		defer t.Release()
		if err := g.MP.AllReduce(ctx, t, parallel.Sum); err != nil {
			return 0, fmt.Errorf("optim: gradient norm over %s: %w", g.MP.Name(), err)
		}
		sum = t.Item()
	}
	return math.Sqrt(sum), nil
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
