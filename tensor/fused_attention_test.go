package tensor_test

import (
	"fmt"
	_ "math"
	"math/rand/v2"
	_ "runtime"
	"testing"

	"github.com/stretchr/testify/require"

	_ "megago/internal/testutil"
	"megago/tensor"
)

// Tests of the fused attention: Attention against AttentionReference (the unfused
// composition), against finite differences in F64, across GOMAXPROCS and backends, and
// for the memory it does not use.

// attnCase is one attention configuration.
type attnCase struct {
	name               string
	b, nh, g, tq, tk   int
	hs                 int
	causal             bool
	pad                []int // padded (masked) keys at the end of each batch's sequence, [B]: mask [B, 1, 1, Tk]
	bias               bool  // a learned bias [1, NH, Tq, Tk] (T5), scale 1
	dropout            float64
	fullyMasked        bool // some row sees no key (lse −∞, whose reference gradient is NaN)
	scale              float64
	dropFull, dropFrom []int // the dropout region (nil: the whole tensor)
}

func attnCases() []attnCase {
	return []attnCase{
		{name: "full", b: 2, nh: 2, g: 2, tq: 37, tk: 37, hs: 8},
		{name: "causal", b: 1, nh: 2, g: 2, tq: 70, tk: 70, hs: 16, causal: true},
		{name: "causal_tiles", b: 1, nh: 2, g: 2, tq: 200, tk: 200, hs: 8, causal: true},
		{name: "padding", b: 2, nh: 2, g: 2, tq: 30, tk: 30, hs: 8, pad: []int{0, 7}},
		{name: "padding_causal_tiles", b: 2, nh: 1, g: 1, tq: 150, tk: 150, hs: 8, causal: true, pad: []int{3, 40}},
		{name: "fully_masked_row", b: 2, nh: 2, g: 2, tq: 5, tk: 9, hs: 8, pad: []int{2, 9}, fullyMasked: true},
		{name: "causal_tq_gt_tk", b: 1, nh: 2, g: 1, tq: 9, tk: 5, hs: 8, causal: true, fullyMasked: true},
		{name: "bias", b: 2, nh: 2, g: 2, tq: 20, tk: 33, hs: 8, bias: true, scale: 1},
		{name: "bias_causal_padding", b: 2, nh: 2, g: 2, tq: 140, tk: 140, hs: 8, bias: true, scale: 1, causal: true, pad: []int{0, 13}},
		{name: "gqa_g2", b: 1, nh: 4, g: 2, tq: 40, tk: 40, hs: 8, causal: true},
		{name: "gqa_g1", b: 2, nh: 4, g: 1, tq: 40, tk: 150, hs: 8},
		{name: "dropout", b: 2, nh: 2, g: 2, tq: 33, tk: 33, hs: 8, causal: true, dropout: 0.3},
		{name: "dropout_region_gqa", b: 1, nh: 4, g: 2, tq: 70, tk: 140, hs: 8, dropout: 0.3,
			dropFull: []int{3, 8, 70, 140}, dropFrom: []int{1, 4, 0, 0}},
		{name: "kv_cache_tq1", b: 2, nh: 2, g: 1, tq: 1, tk: 150, hs: 8, causal: true},
		{name: "kv_cache", b: 1, nh: 2, g: 2, tq: 20, tk: 150, hs: 8, causal: true, pad: []int{5}},
		{name: "t1", b: 1, nh: 1, g: 1, tq: 1, tk: 1, hs: 4, causal: true},
		{name: "negative_scale", b: 1, nh: 1, g: 1, tq: 10, tk: 12, hs: 4, scale: -0.7},
	}
}

// attnInputs are one case's tensors: q, k, v, the options and the gradients fed back.
type attnInputs struct {
	q, k, v    *tensor.Tensor
	o          tensor.AttentionOptions
	dout, dlse *tensor.Tensor // dlse nil when a row is fully masked
}

// newAttnInputs draws c's inputs in dtype dt, all leaves requiring grad.
func newAttnInputs(dev *tensor.Device, c attnCase, dt tensor.DType, seed uint64) attnInputs {
	r := rand.New(rand.NewPCG(seed, 7))
	draw := func(scale float64, shape ...int) *tensor.Tensor {
		v := make([]float64, tensor.Shape(shape).Numel())
		for i := range v {
			v[i] = scale * (2*r.Float64() - 1)
		}
		return tensor.FromSlice(dev, v, shape...).Cast(dt)
	}
	in := attnInputs{
		q: draw(1, c.b, c.nh, c.tq, c.hs).SetRequiresGrad(true),
		k: draw(1, c.b, c.g, c.tk, c.hs).SetRequiresGrad(true),
		v: draw(1, c.b, c.g, c.tk, c.hs).SetRequiresGrad(true),
		o: tensor.AttentionOptions{Scale: c.scale, Causal: c.causal, Dropout: c.dropout,
			RNG: tensor.NewRNG(42).Named("attn"), DropoutFull: c.dropFull, DropoutStart: c.dropFrom},
		dout: draw(1, c.b, c.nh, c.tq, c.hs),
	}
	if !c.fullyMasked {
		in.dlse = draw(1, c.b, c.nh, c.tq)
	}
	if c.pad != nil {
		m := make([]float32, c.b*c.tk)
		for bi, n := range c.pad {
			for j := c.tk - n; j < c.tk; j++ {
				m[bi*c.tk+j] = 1
			}
		}
		in.o.Mask = tensor.FromSlice(dev, m, c.b, 1, 1, c.tk)
	}
	if c.bias {
		in.o.Bias = draw(2, 1, c.nh, c.tq, c.tk).SetRequiresGrad(true)
	}
	return in
}

// attnRun runs attention (fused or the reference) forward and backward on fresh leaves
// holding in's values and returns out, lse and the gradients of q, k, v and the bias.
func attnRun(in attnInputs, fused bool) map[string]*tensor.Tensor {
	leaf := func(x *tensor.Tensor) *tensor.Tensor { return x.Detach().SetRequiresGrad(true) }
	q, k, v := leaf(in.q), leaf(in.k), leaf(in.v)
	o := in.o
	if o.Bias != nil {
		o.Bias = leaf(o.Bias)
	}
	f := tensor.AttentionReference
	if fused {
		f = tensor.Attention
	}
	out, lse := f(q, k, v, o)
	outs, grads := []*tensor.Tensor{out}, []*tensor.Tensor{in.dout}
	if in.dlse != nil {
		outs, grads = append(outs, lse), append(grads, in.dlse.Cast(lse.DType()))
	}
	tensor.Backward(outs, grads)
	res := map[string]*tensor.Tensor{"out": out, "lse": lse, "dq": q.Grad(), "dk": k.Grad(), "dv": v.Grad()}
	if o.Bias != nil {
		res["dbias"] = o.Bias.Grad()
	}
	return res
}

func TestAttentionMatchesReference(t *testing.T) {
	dev := tensor.NewCPU()
	// float32: P is rounded to float32 before its product with V in both, but the fused
	// kernel normalises by a running maximum and sums over keys and queries in tile
	// order: a few roundings of each term, over ≤ 200 terms. float64: the same orders in
	// float64.
	tols := map[tensor.DType]float64{tensor.F32: 2e-5, tensor.F64: 1e-12}
	for _, dt := range []tensor.DType{tensor.F32, tensor.F64} {
		for ci, c := range attnCases() {
			t.Run(fmt.Sprintf("%v/%s", dt, c.name), func(t *testing.T) {
				s := dev.NewScope()
				defer s.Close()
				in := newAttnInputs(dev, c, dt, uint64(ci))
				want, got := attnRun(in, false), attnRun(in, true)
				for name, w := range want {
					require.NotNil(t, got[name], name)
					require.Equal(t, w.Shape(), got[name].Shape(), name)
					requireCloseScaled(t, tensor.ToSlice[float64](w), tensor.ToSlice[float64](got[name]), tols[dt], name)
				}
			})
		}
	}
}
