package ckpt

import (
	"context"
	"fmt"

	"megago/examples/internal/ranks"
	"megago/nn"
	"megago/tensor"
)

// checkFinite returns an error, on every rank alike, when a weight on any rank holds a
// NaN or an infinity: such a checkpoint is never published. it is the iteration about
// to be saved.
func (c *Checkpointer) checkFinite(ctx context.Context, it int) error {
	bad := nonFinite(c.State.Params)
	found, err := ranks.AnyRank(ctx, c.mesh.World(), c.State.Params[0].Device(), bad != "")
	if err != nil {
		return err
	}
	if !found[0] {
		return nil
	}
	what := "a parameter on another rank"
	if bad != "" {
		what = "parameter " + bad
	}
	kept := "nothing was saved there in this run"
	if c.saved > 0 {
		kept = fmt.Sprintf("the latest checkpoint there is still iteration %d", c.saved)
	}
	return fmt.Errorf("not saving iteration %d to %s: %s holds NaN or Inf (%s)", it, c.f.Save, what, kept)
}

// nonFinite returns the name of the first of params that holds a NaN or an infinity,
// or "" when all are finite. It sums 0·x over each: 0 where x is finite, NaN otherwise.
func nonFinite(params []*nn.Param) string {
	for _, p := range params {
		dev := p.Device()
		var v float64
		dev.NoGrad(func() {
			s := dev.NewScope()
			defer s.Close()
			v = tensor.Sum(tensor.Scale(p.Tensor, 0)).Cast(tensor.F64).Item()
		})
		if v != 0 {
			return p.Name
		}
	}
	return ""
}
