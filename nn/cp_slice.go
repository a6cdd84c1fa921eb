package nn

import (
	"fmt"

	"megago/tensor"
)

// CPSlice returns context-parallel rank r's positions of x [B, T, ...] (token ids,
// labels, loss masks, position ids): CPPositions(T, cp, r) along dim 1, [B, T/cp, ...],
// chunks r and 2·cp−1−r of T/(2·cp) in that order. With cp = 1 it returns x. It panics
// if x has no dim 1 or CPPositions panics.
func CPSlice(x *tensor.Tensor, cp, r int) *tensor.Tensor {
	if x.Rank() < 2 {
		panic(fmt.Sprintf("nn: CPSlice: %v has no sequence dim (want [B, T, ...])", x.Shape()))
	}
	t := x.Dim(1)
	CPPositions(t, cp, r) // checks t, cp and r
	if cp == 1 {
		return x
	}
	n := t / (2 * cp)
	return tensor.Concat(1, x.Narrow(1, r*n, n), x.Narrow(1, (2*cp-1-r)*n, n))
}
