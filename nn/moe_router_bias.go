package nn

import (
	"context"
	"fmt"

	"megago/parallel"
	"megago/tensor"
)

// UpdateExpertBias ends a training step for the routers of ms (each a *Router or a module
// holding routers), as Megatron's finalize_model_grads does after the gradients are
// reduced: it sums over group the tokens each router with an ExpertBias kept per expert
// since the last update (in backward passes), moves the bias by rate·sign(mean − count)
// in float32 (MoEConfig.BiasUpdateRate; experts with fewer tokens than the mean gain,
// the others lose), and zeroes the counts; and it ends the window over which
// global_aux_loss averages its counts. Call it after every step, with the group of ranks
// that see different tokens of the global batch (TP×CP×DP, Megatron's tp_dp_cp group;
// nil means one rank). Every rank of group must call it with the same routers. It returns
// the error of the all-reduce.
func UpdateExpertBias(ctx context.Context, group parallel.Comm, ms ...Module) error {
	if group == nil {
		group = parallel.Self()
	}
	var rs []*Router
	var counts []float32 // the routers' counts, one after the other
	for _, r := range routersOf(ms) {
		r.slots = nil
		if r.ExpertBias != nil {
			rs = append(rs, r)
			counts = append(counts, toFloat32(r.biasCounts)...)
		}
	}
	if len(rs) == 0 {
		return nil
	}
	dev := rs[0].ExpertBias.Device()
	t := tensor.FromSlice(dev, counts)
	if err := group.AllReduce(ctx, t, parallel.Sum); err != nil {
		return fmt.Errorf("nn: UpdateExpertBias: all-reduce of tokens per expert over %s: %w", group.Name(), err)
	}
	counts = tensor.ToSlice[float32](t)
	for _, r := range rs {
		e := r.set.e
		c := counts[:e]
		counts = counts[e:]
		bias := tensor.ToSlice[float32](r.ExpertBias)
		sum := float32(0)
		for _, v := range c {
			sum += v
		}
		mean, rate := sum/float32(e), float32(r.rate)
		for j, v := range c {
			switch {
			case mean > v:
				bias[j] += rate
			case mean < v:
				bias[j] -= rate
			}
		}
		r.ExpertBias.CopyFrom(tensor.FromSlice(r.ExpertBias.Device(), bias, e))
		clear(r.biasCounts)
	}
	return nil
}
