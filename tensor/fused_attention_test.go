package tensor_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"megago/internal/testutil"
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
	dropFull, dropFrom []int   // the dropout region (nil: the whole tensor)
	docs               [][]int // per batch, the lengths of the documents packed into Tk keys: Segments
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
		{name: "segments", b: 1, nh: 2, g: 2, tq: 40, tk: 40, hs: 8, docs: [][]int{{10, 1, 29}}},
		{name: "segments_causal_tiles_gqa", b: 2, nh: 2, g: 1, tq: 260, tk: 260, hs: 8, causal: true,
			docs: [][]int{{70, 160, 30}, {5, 1, 150, 104}}}, // sample 1's last query tiles skip key tile 0
		{name: "segments_kv_cache_padding", b: 2, nh: 2, g: 1, tq: 20, tk: 150, hs: 8, causal: true, pad: []int{0, 3},
			docs: [][]int{{140, 10}, {150}}},
		{name: "segments_bias_dropout", b: 1, nh: 2, g: 2, tq: 140, tk: 140, hs: 8, causal: true, bias: true, scale: 1,
			dropout: 0.2, docs: [][]int{{64, 76}}},
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
	if c.docs != nil {
		in.o.Segments = segmentIDs(dev, c.docs)
	}
	return in
}

// segmentIDs returns the segments [B, T] (I32) of documents of lengths docs[b] packed
// one after another into each sample, numbered from 0 in each.
func segmentIDs(dev *tensor.Device, docs [][]int) *tensor.Tensor {
	var ids []int32
	for _, lens := range docs {
		for d, n := range lens {
			for range n {
				ids = append(ids, int32(d))
			}
		}
	}
	return tensor.FromSlice(dev, ids, len(docs), len(ids)/len(docs))
}

// attnRun runs attention (fused or the reference) forward and backward on fresh leaves
// holding in's values and returns out, lse and the gradients of q, k, v and the bias.
func attnRun(in attnInputs, fused bool) map[string]*tensor.Tensor {
	f := tensor.AttentionReference
	if fused {
		f = tensor.Attention
	}
	return attnRunFunc(in, f, in.dout)
}

// attnRunFunc is attnRun for the attention f, whose output's gradient is dout (in.dout
// in f's output layout).
func attnRunFunc(in attnInputs, f func(q, k, v *tensor.Tensor, o tensor.AttentionOptions) (out, lse *tensor.Tensor),
	dout *tensor.Tensor) map[string]*tensor.Tensor {
	leaf := func(x *tensor.Tensor) *tensor.Tensor { return x.Detach().SetRequiresGrad(true) }
	q, k, v := leaf(in.q), leaf(in.k), leaf(in.v)
	o := in.o
	if o.Bias != nil {
		o.Bias = leaf(o.Bias)
	}
	out, lse := f(q, k, v, o)
	outs, grads := []*tensor.Tensor{out}, []*tensor.Tensor{dout}
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
	// float64. bfloat16: the reference rounds the scores, probabilities and every
	// intermediate gradient to bfloat16 (u = 3.9e-3), the fused kernels compute in float32
	// and round only their results.
	tols := map[tensor.DType]float64{tensor.F32: 2e-5, tensor.F64: 1e-12, tensor.BF16: 2e-2}
	for _, dt := range []tensor.DType{tensor.F32, tensor.F64, tensor.BF16} {
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

// TestAttentionWideHeads: float32 at head sizes and lengths where the kernel's tile
// products run whole SIMD panels, partial ones and edge panels, and skip what the causal
// mask hides (several key tiles, causal with Tq < Tk and Tq > Tk), against the reference.
func TestAttentionWideHeads(t *testing.T) {
	dev := tensor.NewCPU()
	for ci, c := range []attnCase{
		{name: "causal_hs64", b: 1, nh: 2, g: 1, tq: 300, tk: 300, hs: 64, causal: true},
		{name: "kv_cache_hs40", b: 1, nh: 2, g: 2, tq: 77, tk: 290, hs: 40, causal: true, pad: []int{6}},
		{name: "tq_gt_tk_hs48", b: 1, nh: 1, g: 1, tq: 270, tk: 140, hs: 48, causal: true, fullyMasked: true},
		{name: "bias_dropout_hs32", b: 1, nh: 2, g: 2, tq: 150, tk: 150, hs: 32, causal: true, bias: true, scale: 1, dropout: 0.2},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := dev.NewScope()
			defer s.Close()
			in := newAttnInputs(dev, c, tensor.F32, uint64(100+ci))
			want, got := attnRun(in, false), attnRun(in, true)
			for name, w := range want {
				require.NotNil(t, got[name], name)
				// as in TestAttentionMatchesReference, over ≤ 300 terms
				requireCloseScaled(t, tensor.ToSlice[float64](w), tensor.ToSlice[float64](got[name]), 3e-5, name)
			}
		})
	}
}

// TestAttentionGradCheck checks Attention's gradients with respect to q, k, v and the
// bias, through out and lse, against central differences in float64.
func TestAttentionGradCheck(t *testing.T) {
	dev := tensor.NewCPU()
	cases := []attnCase{
		{name: "causal_padding_bias_gqa", b: 2, nh: 2, g: 1, tq: 5, tk: 7, hs: 3, causal: true, pad: []int{0, 2}, bias: true, scale: 0.8},
		{name: "dropout_gqa", b: 1, nh: 4, g: 2, tq: 6, tk: 6, hs: 3, causal: true, dropout: 0.3},
		{name: "tiles", b: 1, nh: 1, g: 1, tq: 66, tk: 130, hs: 2, causal: true},
		{name: "segments_gqa", b: 2, nh: 2, g: 1, tq: 6, tk: 8, hs: 3, causal: true, docs: [][]int{{3, 5}, {1, 6, 1}}},
		{name: "segments_tiles", b: 1, nh: 1, g: 1, tq: 70, tk: 140, hs: 2, causal: true, docs: [][]int{{40, 35, 65}}},
	}
	for ci, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := newAttnInputs(dev, c, tensor.F64, uint64(ci))
			xs := []*tensor.Tensor{in.q.Detach(), in.k.Detach(), in.v.Detach()}
			if c.bias {
				xs = append(xs, in.o.Bias.Detach())
			}
			gradCheck(t, func(xs []*tensor.Tensor) *tensor.Tensor {
				o := in.o
				if c.bias {
					o.Bias = xs[3]
				}
				out, lse := tensor.Attention(xs[0], xs[1], xs[2], o)
				return tensor.Concat(2, out.Reshape(c.b, c.nh, c.tq*c.hs), lse) // [B, NH, Tq·(HS+1)]
			}, xs...)
		})
	}
}

// attnBits runs the fused attention forward and backward and returns every result's bits.
func attnBits(in attnInputs) map[string][]uint32 {
	res := map[string][]uint32{}
	for name, x := range attnRun(in, true) {
		res[name] = bits(x)
	}
	return res
}

// TestAttentionDeterministicAcrossThreads: the fused kernels give the same bits at any
// GOMAXPROCS (few heads, so the backward splits key ranges and sums partial dQ).
func TestAttentionDeterministicAcrossThreads(t *testing.T) {
	dev := tensor.NewCPU()
	for _, c := range []attnCase{
		{name: "causal_bias_dropout", b: 1, nh: 3, g: 3, tq: 300, tk: 300, hs: 16, causal: true, bias: true, scale: 1, dropout: 0.1, pad: []int{20}},
		{name: "gqa", b: 2, nh: 4, g: 2, tq: 130, tk: 260, hs: 16, causal: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := newAttnInputs(dev, c, tensor.F32, 3)
			results := map[int]map[string][]uint32{}
			for _, procs := range []int{1, 2, 3} {
				old := runtime.GOMAXPROCS(procs)
				results[procs] = attnBits(in)
				runtime.GOMAXPROCS(old)
			}
			for _, procs := range []int{2, 3} {
				for name, want := range results[1] {
					if i := firstDiff(results[procs][name], want); i >= 0 {
						t.Errorf("GOMAXPROCS=%d: %s differs from GOMAXPROCS=1 at element %d", procs, name, i)
					}
				}
			}
		})
	}
}

// TestAttentionBackendsAgree: every backend's fused attention equals the CPU backend's
// bit for bit, and counts as a fused call where the reference does not.
func TestAttentionBackendsAgree(t *testing.T) {
	c := attnCase{name: "mixed", b: 2, nh: 4, g: 2, tq: 70, tk: 140, hs: 8, causal: true, pad: []int{0, 9}, bias: true, scale: 0.5, dropout: 0.2}
	results := map[string]map[string][]uint32{}
	testutil.ForEachBackend(t, func(t *testing.T, dev *tensor.Device) {
		s := dev.NewScope()
		defer s.Close()
		in := newAttnInputs(dev, c, tensor.F32, 5)
		attnRun(in, false)
		require.Zero(t, dev.FusedCount(tensor.FusedAttention), "the reference is not the fused op")
		results[dev.String()] = attnBits(in)
		require.Equal(t, int64(1), dev.FusedCount(tensor.FusedAttention))
	})
	compareBackends(t, results)
}

// TestAttentionMemory: forward and backward at T = 2048 allocate no [T, T] buffer. One
// float32 [T, T] matrix is 16 MiB (the unfused reference allocates 340 MB here); the
// call's outputs, gradients and leaf gradients are 3.5 MiB, the backward's partial dQ of
// its key ranges 1.5 MiB, packing buffers and per-goroutine tiles about 1.5 MiB. So both
// the device storage the call adds to its inputs' and everything it allocates on the Go
// heap (the CPU backend's storage included) stay below the size of one [T, T] matrix.
func TestAttentionMemory(t *testing.T) {
	const b, nh, tlen, hs = 1, 2, 2048, 32
	const square = tlen * tlen * 4 // bytes of one float32 [T, T] matrix
	dev := tensor.NewCPU()
	c := attnCase{b: b, nh: nh, g: nh, tq: tlen, tk: tlen, hs: hs, causal: true}
	in := newAttnInputs(dev, c, tensor.F32, 9)
	in.dlse = nil
	inUse := dev.Stats().InUse
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	s := dev.NewScope()
	attnRun(in, true)
	s.Close()
	runtime.ReadMemStats(&after)
	require.Less(t, dev.Stats().Peak-inUse, int64(square), "device storage added by forward and backward")
	require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(square), "Go heap allocated by forward and backward")
}

func TestAttentionPanics(t *testing.T) {
	dev := tensor.NewCPU()
	f32 := func(shape ...int) *tensor.Tensor { return tensor.Zeros(dev, tensor.F32, shape...) }
	q, kv := f32(2, 4, 3, 8), f32(2, 2, 5, 8)
	cases := []struct {
		name string
		f    func()
		want string
	}{
		{"rank", func() { tensor.Attention(f32(4, 3, 8), kv, kv, tensor.AttentionOptions{}) }, "tensor: Attention: q float32 [4 3 8]"},
		{"dtype", func() { tensor.Attention(q, kv.Cast(tensor.F64), kv, tensor.AttentionOptions{}) }, "dtypes differ"},
		{"int", func() {
			x := tensor.Zeros(dev, tensor.I32, 2, 4, 3, 8)
			tensor.Attention(x, x, x, tensor.AttentionOptions{})
		}, "not a float dtype"},
		{"head_size", func() { tensor.Attention(q, f32(2, 2, 5, 4), f32(2, 2, 5, 4), tensor.AttentionOptions{}) }, "shapes differ"},
		{"groups", func() { tensor.Attention(q, f32(2, 3, 5, 8), f32(2, 3, 5, 8), tensor.AttentionOptions{}) }, "not a multiple of key/value heads"},
		{"mask", func() { tensor.Attention(q, kv, kv, tensor.AttentionOptions{Mask: f32(2, 1, 1, 4)}) }, "mask [2 1 1 4] does not broadcast to the scores [2 4 3 5]"},
		{"bias_shape", func() { tensor.Attention(q, kv, kv, tensor.AttentionOptions{Bias: f32(1, 2, 3, 5)}) }, "bias [1 2 3 5] does not broadcast"},
		{"bias_dtype", func() {
			tensor.Attention(q, kv, kv, tensor.AttentionOptions{Bias: tensor.Zeros(dev, tensor.F64, 1, 4, 3, 5)})
		}, "bias float64 [1 4 3 5] for q float32 [2 4 3 8]: dtypes differ"},
		{"dropout", func() { tensor.Attention(q, kv, kv, tensor.AttentionOptions{Dropout: 1}) }, "dropout probability 1 outside [0, 1)"},
		{"segments_shape", func() {
			tensor.Attention(q, kv, kv, tensor.AttentionOptions{Segments: tensor.Zeros(dev, tensor.I32, 2, 3)})
		}, "segments int32 [2 3]: want int32 [B, Tk] = [2 5]"},
		{"segments_dtype", func() {
			tensor.Attention(q, kv, kv, tensor.AttentionOptions{Segments: tensor.Zeros(dev, tensor.I64, 2, 5)})
		}, "segments int64 [2 5]: want int32"},
		{"segments_tq_gt_tk", func() {
			tensor.Attention(f32(2, 4, 6, 8), kv, kv, tensor.AttentionOptions{Segments: tensor.Zeros(dev, tensor.I32, 2, 5)})
		}, "segments with 6 queries for 5 keys"},
		{"region", func() {
			tensor.Attention(q, kv, kv, tensor.AttentionOptions{Dropout: 0.1, DropoutFull: tensor.Shape{2, 4, 3, 5}, DropoutStart: []int{0, 1, 0, 0}})
		}, "tensor: Attention dropout: region start [0 1 0 0] size [2 4 3 5] outside [2 4 3 5]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { expectPanic(t, c.want, c.f) })
	}
}

// TestAttentionFullyMaskedRow: a query that sees no key gets output 0 and lse −∞, and
// passes no gradient.
func TestAttentionFullyMaskedRow(t *testing.T) {
	dev := tensor.NewCPU()
	c := attnCase{b: 1, nh: 1, g: 1, tq: 3, tk: 2, hs: 4, causal: true} // query 0 sees no key
	in := newAttnInputs(dev, c, tensor.F32, 1)
	res := attnRun(in, true)
	require.Equal(t, math.Inf(-1), tensor.ToSlice[float64](res["lse"])[0])
	require.Equal(t, make([]float32, c.hs), tensor.ToSlice[float32](res["out"])[:c.hs])
	require.Equal(t, make([]float32, c.hs), tensor.ToSlice[float32](res["dq"])[:c.hs])
}

// Causal attention of two queries that score every key alike: the first sees only the
// first key, the second averages both values; lse is ln Σ e^0 over the keys each sees.
func ExampleAttention() {
	dev := tensor.NewCPU()
	q := tensor.Zeros(dev, tensor.F32, 1, 1, 2, 2)                               // [B, NH, Tq, HS]
	k := tensor.Ones(dev, tensor.F32, 1, 1, 2, 2)                                // [B, G, Tk, HS]
	v := tensor.FromSlice(dev, []float32{1, 2, 3, 4}, 1, 1, 2, 2)                // [B, G, Tk, HS]
	out, lse := tensor.Attention(q, k, v, tensor.AttentionOptions{Causal: true}) // [B, NH, Tq, HS], [B, NH, Tq]
	fmt.Println("out:", tensor.ToSlice[float32](out))
	fmt.Printf("lse: %.4f\n", tensor.ToSlice[float32](lse))
	// Output:
	// out: [1 2 2 3]
	// lse: [0.0000 0.6931]
}
