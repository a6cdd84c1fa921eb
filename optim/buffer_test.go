package optim

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"megago/nn"
	"megago/tensor"
)

func TestPaddingCheckValues(t *testing.T) {
	// MEGATRON-FACTS: parameter starts round up to 64 elements, bucket ends to lcm(DP, 128).
	for in, want := range map[int]int{0: 0, 1: 64, 63: 64, 64: 64, 65: 128} {
		require.Equal(t, want, padParamStart(in), "param start %d", in)
	}
	for _, tc := range []struct{ end, dp, want int }{
		{1, 1, 128}, {128, 1, 128}, {129, 2, 256}, {129, 3, 384}, {385, 3, 768}, {1, 256, 256}, {257, 8, 384},
	} {
		require.Equal(t, tc.want, padBucketEnd(tc.end, tc.dp), "bucket end %d at dp %d", tc.end, tc.dp)
	}
}

// sizedParams returns replicated F32 parameters with the given element counts, named
// p0, p1, ..., holding distinct values.
func sizedParams(dev *tensor.Device, sizes ...int) []*nn.Param {
	var ps []*nn.Param
	at := 0.0
	for i, n := range sizes {
		v := make([]float64, n)
		for j := range v {
			at++
			v[j] = at
		}
		ps = append(ps, newTestParam(dev, tensor.F32, fmt.Sprintf("p%d", i), v, n))
	}
	return ps
}

func TestBufferLayout(t *testing.T) {
	for _, tc := range []struct {
		name    string
		sizes   []int
		dp      int
		bucket  int
		offsets []int    // per parameter, in the params' order
		buckets [][2]int // [start, end)
	}{
		// Reverse order: p2 (64) at 0, p1 (63) at 64, p0 (1) at 128, end 129 → 256.
		{"reverse-order", []int{1, 63, 64}, 1, 0, []int{128, 64, 0}, [][2]int{{0, 256}}},
		{"start-65", []int{65, 3}, 1, 0, []int{64, 0}, [][2]int{{0, 256}}},
		{"dp3", []int{65, 3}, 3, 0, []int{64, 0}, [][2]int{{0, 384}}},
		// Bucket size 100: p2 (70) then p1 (40) at 128 reaches 168 − 0 ≥ 100 → close at 256.
		{"buckets", []int{10, 40, 70}, 2, 100, []int{256, 128, 0}, [][2]int{{0, 256}, {256, 384}}},
		{"bucket-per-param", []int{5, 5}, 1, 1, []int{128, 0}, [][2]int{{0, 128}, {128, 256}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dev := tensor.NewCPU()
			ps := sizedParams(dev, tc.sizes...)
			before := make([][]float32, len(ps))
			for i, p := range ps {
				before[i] = tensor.ToSlice[float32](p.Tensor)
			}
			bufs := NewBuffers(ps, BufferConfig{DP: tc.dp, BucketSize: tc.bucket})
			require.Len(t, bufs, 1)
			b := bufs[0]
			for i, p := range ps {
				off, ok := b.Offset(p)
				require.True(t, ok)
				require.Equal(t, tc.offsets[i], off, "offset of %s", p.Name)
				require.Equal(t, before[i], tensor.ToSlice[float32](p.Tensor), "values of %s kept", p.Name)
				// The parameter and its gradient are views of the buffers.
				flat := tensor.ToSlice[float32](b.Params)
				require.Equal(t, before[i], flat[off:off+p.Numel()])
				p.Grad().CopyFrom(tensor.Full(dev, tensor.F32, float64(i+1), p.Shape()...))
				require.Equal(t, float32(i+1), tensor.ToSlice[float32](b.Grads)[off])
			}
			var got [][2]int
			for _, bk := range b.Buckets {
				got = append(got, [2]int{bk.Start, bk.End})
				require.Zero(t, (bk.End-bk.Start)%lcm(max(tc.dp, 1), 128), "bucket %v divisible by lcm(DP, 128)", bk)
			}
			require.Equal(t, tc.buckets, got)
			require.Equal(t, b.Buckets[len(b.Buckets)-1].End, b.Size())
		})
	}
}

func TestBufferBackwardAccumulatesIntoBuffer(t *testing.T) {
	dev := tensor.NewCPU()
	ps := sizedParams(dev, 3, 2)
	b := NewBuffers(ps, BufferConfig{})[0]
	// loss = Σ 2·p0 + Σ p1²: gradients 2 and 2·p1, accumulated over two backward passes.
	for range 2 {
		loss := tensor.Add(tensor.Sum(tensor.Scale(ps[0].Tensor, 2)), tensor.Sum(tensor.Mul(ps[1].Tensor, ps[1].Tensor)))
		loss.Backward()
	}
	off0, _ := b.Offset(ps[0])
	off1, _ := b.Offset(ps[1])
	g := tensor.ToSlice[float32](b.Grads)
	require.Equal(t, []float32{4, 4, 4}, g[off0:off0+3])
	require.Equal(t, []float32{16, 20}, g[off1:off1+2]) // 2·2·(4, 5)
	// ZeroGrad defers the zeros: the next backward stores its gradient, and settling the
	// buckets (AccumulateGrads) writes the zeros of parameters that received none.
	b.ZeroGrad()
	tensor.Sum(tensor.Scale(ps[0].Tensor, 3)).Backward()
	for i := range b.Buckets {
		b.AccumulateGrads(i)
	}
	want := make([]float32, b.Size())
	copy(want[off0:], []float32{3, 3, 3})
	require.Equal(t, want, tensor.ToSlice[float32](b.Grads))
	b.ZeroGrad()
	for i := range b.Buckets {
		b.AccumulateGrads(i)
	}
	require.Equal(t, make([]float32, b.Size()), tensor.ToSlice[float32](b.Grads))
}

func TestBuffersPerDTypeAndMainGrads(t *testing.T) {
	dev := tensor.NewCPU()
	a := newTestParam(dev, tensor.BF16, "a", []float64{1, 2, 3}, 3)
	f := newTestParam(dev, tensor.F32, "f", []float64{4, 5}, 2)
	c := newTestParam(dev, tensor.BF16, "c", []float64{6}, 1)
	bufs := NewBuffers([]*nn.Param{a, f, c}, BufferConfig{})
	require.Len(t, bufs, 2)
	require.Equal(t, tensor.BF16, bufs[0].DType)
	require.Equal(t, tensor.F32, bufs[1].DType)
	require.Equal(t, []*nn.Param{c, a}, bufs[0].Buckets[0].Params, "reverse order within a dtype")
	require.Equal(t, tensor.F32, bufs[0].MainGrads.DType(), "bf16 gradients accumulate in fp32")
	require.Same(t, bufs[1].Grads, bufs[1].MainGrads, "fp32 gradients are the main gradients")

	// Two micro-batches with gradients 1 and 2^-8: their bf16 sum would round to 1, their
	// fp32 sum is exact.
	for _, s := range []float64{1, 0.00390625} {
		tensor.Sum(tensor.Scale(a.Tensor, s)).Backward()
		bufs[0].AccumulateGrads(0)
	}
	require.Equal(t, []float32{1.00390625, 1.00390625, 1.00390625}, tensor.ToSlice[float32](bufs[0].MainGrad(a)))
	require.Equal(t, []float32{0, 0, 0}, tensor.ToSlice[float32](a.Grad()), "model gradients zeroed")
}

func TestBufferSharedParamOwnBucket(t *testing.T) {
	dev := tensor.NewCPU()
	ps := sizedParams(dev, 4, 4, 4)
	ps[1].Shared = true
	b := NewBuffers(ps, BufferConfig{})[0]
	// Layout order p2, p1 (shared), p0: p2 alone, p1 alone, p0.
	require.Len(t, b.Buckets, 3)
	require.Equal(t, []*nn.Param{ps[2]}, b.Buckets[0].Params)
	require.Equal(t, []*nn.Param{ps[1]}, b.Buckets[1].Params)
	require.Equal(t, []*nn.Param{ps[0]}, b.Buckets[2].Params)
	require.Equal(t, [2]int{128, 256}, [2]int{b.Buckets[1].Start, b.Buckets[1].End})
}

func TestNewBuffersPanics(t *testing.T) {
	dev := tensor.NewCPU()
	ps := sizedParams(dev, 2)
	require.PanicsWithValue(t, "optim: NewBuffers: parameter p0 appears twice", func() {
		NewBuffers([]*nn.Param{ps[0], ps[0]}, BufferConfig{})
	})
	require.Panics(t, func() { NewBuffers(nil, BufferConfig{}) })
}
