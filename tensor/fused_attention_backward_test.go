package tensor_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"megago/tensor"
)

// TestAttentionBackwardOfKeyBlocks: AttentionBackward of each block of keys, given the
// output and log-sum-exp of the attention over all of them (ring attention's backward),
// gives the unfused reference's gradients of the whole attention: the blocks' dQ summed,
// their dK and dV side by side. With one block it is Attention's own backward. GQA, and
// dropout drawn at each block's key offset in the whole probability tensor.
func TestAttentionBackwardOfKeyBlocks(t *testing.T) {
	// float64: the blocks and the reference sum the same terms in different orders.
	const tol = 1e-12
	dev := tensor.NewCPU()
	for _, tc := range []struct {
		name   string
		c      attnCase
		blocks []int // key block sizes
	}{
		{"one-block", attnCase{b: 2, nh: 2, g: 2, tq: 20, tk: 30, hs: 8}, []int{30}},
		{"three-blocks-gqa", attnCase{b: 1, nh: 4, g: 2, tq: 24, tk: 70, hs: 8}, []int{15, 40, 15}},
		{"two-blocks-dropout", attnCase{b: 2, nh: 2, g: 1, tq: 16, tk: 48, hs: 8, dropout: 0.3}, []int{32, 16}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := dev.NewScope()
			defer s.Close()
			in := newAttnInputs(dev, tc.c, tensor.F64, 3)
			in.dlse = nil
			want := attnRun(in, false)
			out, lse := want["out"], want["lse"]
			o := in.o
			full := tensor.Shape{tc.c.b, tc.c.nh, tc.c.tq, tc.c.tk}
			var dq *tensor.Tensor
			var dks, dvs []*tensor.Tensor
			ks, vs := tensor.Split(in.k.Detach(), 2, tc.blocks...), tensor.Split(in.v.Detach(), 2, tc.blocks...)
			at := 0
			for i, n := range tc.blocks {
				o.DropoutFull, o.DropoutStart = full, []int{0, 0, 0, at}
				gq, gk, gv := tensor.AttentionBackward(in.q.Detach(), ks[i], vs[i], out, lse, in.dout, o)
				require.Equal(t, ks[i].Shape(), gk.Shape())
				if dq == nil {
					dq = gq
				} else {
					dq = tensor.Add(dq, gq)
				}
				dks, dvs = append(dks, gk), append(dvs, gv)
				at += n
			}
			require.InDeltaSlice(t, tensor.ToSlice[float64](want["dq"]), tensor.ToSlice[float64](dq), tol, "dq")
			require.InDeltaSlice(t, tensor.ToSlice[float64](want["dk"]), tensor.ToSlice[float64](tensor.Concat(2, dks...)), tol, "dk")
			require.InDeltaSlice(t, tensor.ToSlice[float64](want["dv"]), tensor.ToSlice[float64](tensor.Concat(2, dvs...)), tol, "dv")
		})
	}
}

// TestAttentionBackwardPanics: an output, log-sum-exp or output gradient of the wrong
// shape or dtype panics naming it.
func TestAttentionBackwardPanics(t *testing.T) {
	dev := tensor.NewCPU()
	q := tensor.Zeros(dev, tensor.F32, 1, 2, 4, 8)
	k := tensor.Zeros(dev, tensor.F32, 1, 2, 6, 8)
	out, lse := tensor.Zeros(dev, tensor.F32, 1, 2, 4, 8), tensor.Zeros(dev, tensor.F32, 1, 2, 4)
	require.PanicsWithValue(t, "tensor: AttentionBackward: lse float32 [1 2 5] on cpu for q float32 [1 2 4 8]: want float32 [1 2 4] on q's device",
		func() {
			tensor.AttentionBackward(q, k, k, out, tensor.Zeros(dev, tensor.F32, 1, 2, 5), out, tensor.AttentionOptions{})
		})
	require.PanicsWithValue(t, "tensor: AttentionBackward: dout float64 [1 2 4 8] on cpu for q float32 [1 2 4 8]: want float32 [1 2 4 8] on q's device",
		func() {
			tensor.AttentionBackward(q, k, k, out, lse, tensor.Zeros(dev, tensor.F64, 1, 2, 4, 8), tensor.AttentionOptions{})
		})
}
