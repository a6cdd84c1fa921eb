package tensor_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"megago/internal/testutil"
	"megago/tensor"
)

// TestAttentionSegmentsArePackedDocuments: causal attention over documents packed into
// one sequence with Segments gives each document's outputs, lse and gradients as
// attention over that document alone, an independent check of what the reference and
// the kernels both compute.
func TestAttentionSegmentsArePackedDocuments(t *testing.T) {
	dev := tensor.NewCPU()
	docs := []int{90, 1, 140, 29} // 260 keys: documents across, inside and at tile edges
	c := attnCase{b: 1, nh: 2, g: 1, tq: 260, tk: 260, hs: 8, causal: true, docs: [][]int{docs}}
	in := newAttnInputs(dev, c, tensor.F32, 11)
	packed := attnRun(in, true)
	from := 0
	for _, n := range docs {
		part := attnInputs{q: in.q.Narrow(2, from, n), k: in.k.Narrow(2, from, n), v: in.v.Narrow(2, from, n),
			o: tensor.AttentionOptions{Causal: true}, dout: in.dout.Narrow(2, from, n), dlse: in.dlse.Narrow(2, from, n)}
		alone := attnRun(part, true)
		for name, w := range alone {
			got := packed[name].Narrow(2, from, n)
			// the same sums but tiled differently: a row's keys start at another tile edge
			requireCloseScaled(t, tensor.ToSlice[float64](w), tensor.ToSlice[float64](got), 2e-5, name)
		}
		from += n
	}
}

// TestAttentionOneSegmentIsUnmasked: Segments holding one document give the results of
// attention without them, bit for bit (every tile takes the unmasked path).
func TestAttentionOneSegmentIsUnmasked(t *testing.T) {
	dev := tensor.NewCPU()
	c := attnCase{b: 2, nh: 2, g: 1, tq: 70, tk: 200, hs: 8, causal: true, docs: [][]int{{200}, {200}}}
	in := newAttnInputs(dev, c, tensor.F32, 12)
	with := attnBits(in)
	in.o.Segments = nil
	for name, want := range attnBits(in) {
		if i := firstDiff(with[name], want); i >= 0 {
			t.Errorf("%s differs at element %d", name, i)
		}
	}
}

// TestAttentionSegmentsBackendsAgree: every backend's attention with Segments equals the
// CPU backend's bit for bit.
func TestAttentionSegmentsBackendsAgree(t *testing.T) {
	c := attnCase{b: 2, nh: 2, g: 1, tq: 20, tk: 140, hs: 8, causal: true, docs: [][]int{{130, 10}, {2, 138}}}
	results := map[string]map[string][]uint32{}
	testutil.ForEachBackend(t, func(t *testing.T, dev *tensor.Device) {
		s := dev.NewScope()
		defer s.Close()
		results[dev.String()] = attnBits(newAttnInputs(dev, c, tensor.F32, 6))
	})
	compareBackends(t, results)
}

// TestSegmentMask: the mask of two documents, one query per key, and its union with a
// padding mask.
func TestSegmentMask(t *testing.T) {
	dev := tensor.NewCPU()
	seg := tensor.FromSlice(dev, []int32{0, 0, 1}, 1, 3)
	require.Equal(t, []float32{
		0, 0, 1,
		0, 0, 1,
		1, 1, 0,
	}, tensor.ToSlice[float32](tensor.SegmentMask(seg, 3, nil)))
	pad := tensor.FromSlice(dev, []float32{0, 1, 0}, 1, 1, 1, 3)
	m := tensor.SegmentMask(seg, 2, pad) // queries 1 and 2
	require.Equal(t, tensor.Shape{1, 1, 2, 3}, m.Shape())
	require.Equal(t, []float32{
		0, 1, 1,
		1, 1, 0,
	}, tensor.ToSlice[float32](m))
	expectPanic(t, "want int32 [B, Tk] with Tk ≥ 4", func() { tensor.SegmentMask(seg, 4, nil) })
}

// BenchmarkAttentionDocuments times causal attention (NH = 4, HS = 64, float32, T = 2048)
// forward and backward over one document and over documents of 256 tokens (Segments),
// whose tiles of keys in other documents the kernel skips:
//
//	go test ./tensor -run '^$' -bench AttentionDocuments -benchtime 3x
//
// tok/s counts the sequence's tokens.
func BenchmarkAttentionDocuments(b *testing.B) {
	const nh, t, hs = 4, 2048, 64
	dev := tensor.NewCPU()
	for _, doc := range []int{t, 256} {
		b.Run(fmt.Sprintf("doc=%d", doc), func(b *testing.B) {
			docs := make([]int, t/doc)
			for i := range docs {
				docs[i] = doc
			}
			c := attnCase{b: 1, nh: nh, g: nh, tq: t, tk: t, hs: hs, causal: true, docs: [][]int{docs}}
			in := newAttnInputs(dev, c, tensor.F32, 1)
			b.ResetTimer()
			for range b.N {
				s := dev.NewScope()
				q, k, v := in.q.Detach().SetRequiresGrad(true), in.k.Detach().SetRequiresGrad(true), in.v.Detach().SetRequiresGrad(true)
				out, _ := tensor.Attention(q, k, v, in.o)
				out.BackwardWithGrad(in.dout)
				s.Close()
			}
			b.ReportMetric(float64(t*b.N)/b.Elapsed().Seconds(), "tok/s")
		})
	}
}
