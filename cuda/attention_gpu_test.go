package cuda

import (
	"testing"

	"megago/tensor"
)

// Fused attention through tensor.Attention on this backend against the CPU backend's
// kernel: out, lse and the gradients of q, k, v (through out and lse) and of a bias, F32
// within float32 rounding and BF16 within bf16 rounding; the covered cases must run the
// flash kernels, the others (a head size they are not built for) the host fallback.

// attnCase is one call of tensor.Attention: shapes and options.
type attnCase struct {
	b, nh, g, tq, tk, hs int
	causal               bool
	dropout              float64
	mask                 bool // a padding mask [B, 1, 1, Tk]
	segments             bool // documents of 7 tokens
	bias                 bool // T5's bias [1, NH, Tq, Tk]
	fallback             bool // not covered by the kernels: runs on the host
}

// run computes the case on dev in dt and returns out, lse and the input gradients.
func (c attnCase) run(dev *tensor.Device, dt tensor.DType) map[string]*tensor.Tensor {
	q := rowLeaf(dev, dt, 71, -2, 2, c.b, c.nh, c.tq, c.hs)
	k := rowLeaf(dev, dt, 72, -2, 2, c.b, c.g, c.tk, c.hs)
	v := rowLeaf(dev, dt, 73, -1, 1, c.b, c.g, c.tk, c.hs)
	o := tensor.AttentionOptions{Causal: c.causal, Dropout: c.dropout, RNG: tensor.NewRNG(3).Named("attn")}
	if c.dropout > 0 { // a shard of the full probabilities: heads [NH, 2NH) of 2NH
		o.DropoutFull = tensor.Shape{c.b, 2 * c.nh, c.tq, c.tk}
		o.DropoutStart = []int{0, c.nh, 0, 0}
	}
	if c.mask {
		m := make([]float32, c.b*c.tk)
		for j := range m {
			if j%5 == 3 {
				m[j] = 1
			}
		}
		o.Mask = tensor.FromSlice(dev, m, c.b, 1, 1, c.tk)
	}
	if c.segments {
		seg := make([]int32, c.b*c.tk)
		for j := range seg {
			seg[j] = int32((j%c.tk + j/c.tk) / 7)
		}
		o.Segments = tensor.FromSlice(dev, seg, c.b, c.tk)
	}
	res := map[string]*tensor.Tensor{}
	if c.bias {
		o.Bias = rowLeaf(dev, dt, 76, -1, 1, 1, c.nh, c.tq, c.tk)
		defer func() { res["dbias"] = o.Bias.Grad() }()
	}
	out, lse := tensor.Attention(q, k, v, o)
	dy := rowLeaf(dev, dt, 74, -1, 1, c.b, c.nh, c.tq, c.hs).Detach()
	dl := rowLeaf(dev, lse.DType(), 75, -1, 1, c.b, c.nh, c.tq).Detach()
	// Rows that see no key have lse −∞, and so has the loss; only its gradients are used.
	loss := tensor.Add(tensor.Sum(tensor.Mul(out, dy).Cast(tensor.F32)), tensor.Sum(tensor.Mul(lse, dl)))
	loss.Backward()
	res["out"], res["lse"], res["dq"], res["dk"], res["dv"] = out, lse, q.Grad(), k.Grad(), v.Grad()
	return res
}

func TestGPUAttentionFollowsCPU(t *testing.T) {
	b := openTestBackend(t)
	gpu, cpu := tensor.NewDevice(b), tensor.NewCPU()
	cases := []struct {
		name string
		c    attnCase
	}{
		{"mha/causal", attnCase{b: 2, nh: 2, g: 2, tq: 70, tk: 70, hs: 32, causal: true}},
		{"gqa/full", attnCase{b: 1, nh: 4, g: 2, tq: 33, tk: 33, hs: 32}},
		{"gqa/kvcache", attnCase{b: 1, nh: 4, g: 1, tq: 5, tk: 70, hs: 32, causal: true}},
		{"tq>tk/causal", attnCase{b: 1, nh: 2, g: 2, tq: 40, tk: 24, hs: 32, causal: true}},
		{"gqa/dropout", attnCase{b: 2, nh: 4, g: 2, tq: 20, tk: 20, hs: 32, causal: true, dropout: 0.2}},
		{"gqa/mask", attnCase{b: 2, nh: 4, g: 2, tq: 9, tk: 19, hs: 32, mask: true}},
		{"segments/causal/mask", attnCase{b: 2, nh: 2, g: 1, tq: 30, tk: 30, hs: 16, causal: true, segments: true, mask: true}},
		{"bias", attnCase{b: 2, nh: 2, g: 2, tq: 9, tk: 9, hs: 32, bias: true}},
		{"gqa/bias/dropout/causal", attnCase{b: 2, nh: 4, g: 2, tq: 12, tk: 20, hs: 16, causal: true, bias: true, dropout: 0.3}},
		{"hs24/fallback", attnCase{b: 1, nh: 2, g: 2, tq: 9, tk: 9, hs: 24, mask: true, bias: true, fallback: true}},
	}
	for _, dt := range []tensor.DType{tensor.F32, tensor.BF16} {
		for _, tc := range cases {
			t.Run(dt.String()+"/"+tc.name, func(t *testing.T) {
				before := b.fallbacks.Load()
				got := tc.c.run(gpu, dt)
				if fell := b.fallbacks.Load() - before; (fell > 0) != tc.c.fallback {
					t.Errorf("%d host fallback calls, want some: %v", fell, tc.c.fallback)
				}
				compareResults(t, tc.c.run(cpu, dt), got, nil)
			})
		}
	}
}
