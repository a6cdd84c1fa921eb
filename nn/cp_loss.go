package nn

import (
	"megago/parallel"
	"megago/tensor"
)

// cpMeanLoss returns the mean of losses [B, T/cp] where mask [B, T/cp] is 1 over the
// tokens of every rank of the context-parallel group cp: the group's sum of losses·mask
// divided by the group's count of unmasked tokens (at least 1), the same scalar on every
// rank.
//
// The sum crosses the group through ReduceFromTP then CopyToTP over cp — forward:
// all-reduce; backward: all-reduce — the adjoint of an all-reduce, so this rank's tokens
// receive the gradient of the sum of the cp ranks' (equal) losses, cp times that of the
// mean. A rank's backward reaches only its own tokens' activations (and, through the
// attention ring, the keys and values it sent), so its parameter gradient is its part of
// the whole; averaging those over DP×CP (the optimizer's DPCP group) then gives the
// gradient of the mean, as Megatron's loss·cp_size does. It panics with the *Error if
// the all-reduce of the count fails.
func cpMeanLoss(p *Pass, cp parallel.Comm, losses, mask *tensor.Tensor) *tensor.Tensor {
	n := tensor.Sum(mask).Detach().Cast(tensor.F64).Clone() // [] own storage for the all-reduce
	if err := cp.AllReduce(p.Ctx, n, parallel.Sum); err != nil {
		panic(err)
	}
	sum := tensor.Sum(tensor.Mul(losses, mask))
	sum = parallel.CopyToTP(p.Ctx, cp, parallel.ReduceFromTP(p.Ctx, cp, sum))
	return tensor.Scale(sum, 1/max(n.Item(), 1))
}
