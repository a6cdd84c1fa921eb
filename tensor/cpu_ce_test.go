package tensor

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
)

// TestVocabCEGOMAXPROCS runs the cross-entropy kernels on rows of several blocks, with
// padding, ignored rows and label smoothing, at GOMAXPROCS 1, 2 and 3 and wants the same
// bits.
func TestVocabCEGOMAXPROCS(t *testing.T) {
	be := cpuBackend{}
	r := rand.New(rand.NewPCG(7, 12))
	rows, w := 7, 2*ceBlock+1001
	x, dx := benchSpan(r, rows, w), benchSpan(r, rows, w)
	tgt, dloss := benchIDs(r, rows, w-50), benchSpan(r, rows)
	raw[int64](tgt)[3] = -1 // ignored
	stats := Span{DType: F64, Shape: Shape{4, rows}, Buf: be.Alloc(F64, 4*rows)}
	loss := benchSpan(r, rows)
	p := VocabCrossEntropyParams{Start: 0, Vocab: w - 50, Ignore: true, IgnoreIndex: -1, LabelSmoothing: 0.1}
	run := func() []float64 {
		be.VocabCrossEntropyStats(stats, x, tgt, p)
		be.VocabCrossEntropyLoss(loss, stats, tgt, p)
		be.VocabCrossEntropyBackward(dx, x, tgt, stats, dloss, p)
		out := append([]float64(nil), raw[float64](stats)...)
		for _, v := range raw[float32](loss) {
			out = append(out, float64(v))
		}
		for _, v := range raw[float32](dx) {
			out = append(out, float64(v))
		}
		return out
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	want := run()
	for _, procs := range []int{2, 3} {
		runtime.GOMAXPROCS(procs)
		got := run()
		for i := range want {
			if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
				t.Fatalf("GOMAXPROCS %d: output %d = %g, GOMAXPROCS 1 gave %g", procs, i, got[i], want[i])
			}
		}
	}
}

// BenchmarkVocabCrossEntropy times the kernels at the workloads' logits shapes
// (shared/BENCHMARKS.md: W1 [4·64, 50304], V 50257; W2 [8·256, 8192]) on GOMAXPROCS
// goroutines: fwd is VocabCrossEntropyStats and VocabCrossEntropyLoss (GB/s of logits
// read), bwd VocabCrossEntropyBackward (logits read and gradients written). The machine
// is shared: run with -count and compare medians.
//
//	go test ./tensor -run '^$' -bench VocabCrossEntropy -count 5
func BenchmarkVocabCrossEntropy(b *testing.B) {
	r := rand.New(rand.NewPCG(2, 7))
	be := cpuBackend{}
	for _, sh := range [][3]int{{256, 50304, 50257}, {2048, 8192, 8192}} { // N, Vp, V
		n, w := sh[0], sh[1]
		p := VocabCrossEntropyParams{Vocab: sh[2]}
		logits, dlogits := benchSpan(r, n, w), benchSpan(r, n, w)
		tgt, loss, dloss := benchIDs(r, n, sh[2]), benchSpan(r, n), benchSpan(r, n)
		stats := Span{DType: F64, Shape: Shape{4, n}, Buf: be.Alloc(F64, 4*n)}
		name := fmt.Sprintf("%dx%d", n, w)
		b.Run("fwd/"+name, func(b *testing.B) {
			for b.Loop() {
				be.VocabCrossEntropyStats(stats, logits, tgt, p)
				be.VocabCrossEntropyLoss(loss, stats, tgt, p)
			}
			benchGBs(b, 4*float64(n*w))
		})
		b.Run("bwd/"+name, func(b *testing.B) {
			for b.Loop() {
				be.VocabCrossEntropyBackward(dlogits, logits, tgt, stats, dloss, p)
			}
			benchGBs(b, 8*float64(n*w))
		})
	}
}
