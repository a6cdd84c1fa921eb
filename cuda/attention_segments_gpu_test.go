package cuda

import (
	"testing"

	"megago/tensor"
)

// TestGPUAttentionSegments: tensor.Attention with Segments (documents packed into a
// sequence) gives on the CUDA backend the CPU backend's outputs and gradients, bit for
// bit (the backend runs the CPU kernel on host copies).
func TestGPUAttentionSegments(t *testing.T) {
	w := newTwin(t)
	const b, nh, g, tq, tk, hs = 2, 2, 1, 6, 9, 4
	seg := []int32{0, 0, 0, 1, 1, 1, 1, 2, 2, 0, 1, 1, 1, 1, 1, 1, 1, 1}
	run := func(dev *tensor.Device, res map[string]*tensor.Tensor, seed uint64) {
		x := func(s uint64, shape ...int) *tensor.Tensor {
			return tensor.FromSlice(dev, fusedData(seed+s, tensor.Shape(shape).Numel(), -1, 1), shape...).SetRequiresGrad(true)
		}
		q, k, v := x(1, b, nh, tq, hs), x(2, b, g, tk, hs), x(3, b, g, tk, hs)
		out, lse := tensor.Attention(q, k, v, tensor.AttentionOptions{Causal: true, Segments: tensor.FromSlice(dev, seg, b, tk)})
		tensor.Backward([]*tensor.Tensor{out, lse}, []*tensor.Tensor{x(4, b, nh, tq, hs).Detach(), x(5, b, nh, tq).Detach()})
		res["out"], res["lse"], res["dq"], res["dk"], res["dv"] = out, lse, q.Grad(), k.Grad(), v.Grad()
	}
	run(w.cpu, w.want, 20)
	run(w.gpu, w.got, 20)
	compareResults(t, w.want, w.got, map[string]bool{"out": true, "lse": true, "dq": true, "dk": true, "dv": true})
}
