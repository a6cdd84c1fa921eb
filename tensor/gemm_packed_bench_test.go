package tensor

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkSgemmPacked times the inference products x·Wᵀ with W pre-packed
// (PackedWeights), at the shapes of serve's steps on a GPT-2-124M model: a decode step
// (32 rows, one token per sequence) and a prefill step (544 rows), through the 12 layers'
// four weights (768→2304, 768→768, 768→3072, 3072→768) and the tied-embedding logits
// (768→50257). "step" runs them all, as a step does (497 MB of packed weights, streamed
// from memory); the single shapes cycle through the 12 layers' copies of their weight
// (28-113 MB), so that they too stream W from memory rather than the L3. Names are
// rows×in×out. Run with -benchtime=1x for a quick look, several counts to compare.
func BenchmarkSgemmPacked(b *testing.B) {
	kern := defaultGemmKernel()
	if kern == nil {
		b.Skip("no SIMD GEMM kernel")
	}
	r := rand.New(rand.NewPCG(1, 7))
	layer := [][2]int{{2304, 768}, {768, 768}, {3072, 768}, {768, 3072}} // [out, in]
	const logits = 50257
	pw, dev := NewPackedWeights(), NewCPU()
	weight := func(n, k int) *packedWeight {
		w := Empty(dev, F32, n, k)
		ws := raw[float32](w.Span())
		for i := range ws {
			ws[i] = float32(r.Float64()*2 - 1)
		}
		return pw.packed(kern, w)
	}
	var step []*packedWeight // the model's products in a step's order
	for range 12 {
		for _, nk := range layer {
			step = append(step, weight(nk[0], nk[1]))
		}
	}
	step = append(step, weight(logits, 768))
	for _, rows := range []int{1, 8, 32, 544} {
		x := raw[float32](benchSpan(r, rows, 3072))
		c := raw[float32](benchSpan(r, rows, logits))
		run := func(b *testing.B, ws []*packedWeight) {
			flop := 0.0
			for _, pk := range ws {
				p := MatMulParams{Batch: 1, M: rows, N: pk.sh.n, K: pk.sh.k, TransB: true}
				sgemmPacked(kern, c, x, pk, p) // packs W's panels the first time
				flop += 2 * float64(rows*p.N*p.K)
			}
			b.ResetTimer()
			for b.Loop() {
				for _, pk := range ws {
					sgemmPacked(kern, c, x, pk, MatMulParams{Batch: 1, M: rows, N: pk.sh.n, K: pk.sh.k, TransB: true})
				}
			}
			b.ReportMetric(flop*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		}
		b.Run(fmt.Sprintf("step_%d", rows), func(b *testing.B) { run(b, step) })
		for i, nk := range append(layer, [2]int{logits, 768}) {
			b.Run(fmt.Sprintf("%dx%dx%d", rows, nk[1], nk[0]), func(b *testing.B) {
				ws := step[len(step)-1:] // the logits
				if i < len(layer) {
					ws = nil
					for j := i; j < len(step)-1; j += len(layer) {
						ws = append(ws, step[j])
					}
				}
				run(b, ws)
			})
		}
	}
}
