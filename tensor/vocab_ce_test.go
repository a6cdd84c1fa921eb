package tensor_test

import (
	"fmt"
	"math"
	"testing"

	"megago/internal/testutil"
	"megago/tensor"
)

// Tests of the vocabulary-parallel cross-entropy kernels on every backend against a slow,
// obvious float64 reference: the softmax over the whole (unpadded) vocabulary written
// out, with TP ranks simulated by column slices whose statistics are combined on the host
// as the kernels' contract says (MAX, rescale, SUM).

// vocabCECase is a problem: logits [n, w] (w the padded global width) of which the first
// vocab columns are classes, split over tp ranks.
type vocabCECase struct {
	name           string
	n, w, vocab    int
	tp             int
	eps            float64
	ignore         bool
	negInf         bool // some logits −Inf (a whole block of columns in wide rows)
	dtype          tensor.DType
	lossTol, gradT float64 // relative tolerances (see vocabCECases)
}

func vocabCECases() []vocabCECase {
	// Tolerances: F64 is float64 arithmetic in another order. F32 computes each e^(x−m)
	// in float32 from x−m rounded to float32: relative error up to (|x−m|/2 + 1.5)·2⁻²³,
	// with |x−m| ≤ 12 here, for a gradient element; a softmax-weighted average of it, and
	// the loss's float32 rounding, for the loss. BF16 rounds the outputs to 8 bits.
	const f64, f32, f32grad, bf16 = 1e-13, 6e-7, 1.5e-6, 8e-3
	return []vocabCECase{
		{"odd sizes", 3, 37, 37, 1, 0, false, false, tensor.F32, f32, f32grad},
		{"odd sizes f64", 3, 37, 37, 1, 0, false, false, tensor.F64, f64, f64},
		{"padding over 2 ranks", 5, 40, 33, 2, 0, false, false, tensor.F32, f32, f32grad},
		{"a rank without classes", 4, 48, 30, 3, 0, false, false, tensor.F64, f64, f64},
		{"ignore and smoothing", 6, 50, 47, 2, 0.1, true, false, tensor.F32, f32, f32grad},
		{"ignore and smoothing f64", 6, 50, 47, 2, 0.1, true, false, tensor.F64, f64, f64},
		{"minus infinity logits", 4, 21, 21, 1, 0, false, true, tensor.F32, f32, f32grad},
		{"bf16", 3, 64, 60, 2, 0.2, false, false, tensor.BF16, bf16, bf16},
		// Rows of several 4096-column blocks, enough work to run on goroutines.
		{"wide rows", 5, 9000, 8999, 1, 0.05, true, true, tensor.F32, f32, f32grad},
		{"wide rows over 2 ranks", 5, 9000, 8999, 2, 0, false, false, tensor.F32, f32, f32grad},
		{"wide rows f64", 5, 9000, 8999, 2, 0.05, false, true, tensor.F64, f64, f64},
	}
}

// problem returns the case's logits (already rounded to its dtype), targets (−100 for
// ignored rows) and loss gradients.
func (c vocabCECase) problem() (x []float64, targets []int64, g []float64) {
	raw := hostData(uint64(c.n*c.w+c.vocab), c.n*c.w)
	x = make([]float64, len(raw))
	for i, v := range raw {
		x[i] = 6 * float64(v) // spread the softmax
		if c.negInf && (i%7 == 3 || (c.w > 8192 && i%c.w >= 4096 && i%c.w < 8192)) {
			x[i] = math.Inf(-1)
		}
	}
	x = tensor.ToSlice[float64](tensor.FromSlice(tensor.NewCPU(), x, len(x)).Cast(c.dtype))
	targets, g = make([]int64, c.n), make([]float64, c.n)
	for r := range targets {
		targets[r] = int64((r*131 + 17) % c.vocab)
		if c.negInf {
			targets[r] = int64(r % 3) // not a −Inf column
		}
		if c.ignore && r%3 == 1 {
			targets[r] = -100
		}
		g[r] = 0.5 + 0.25*float64(r)
	}
	return x, targets, g
}

// vocabCEReference returns the per-row loss (PyTorch's cross entropy with label
// smoothing over the vocab classes) and the gradient of Σ g·loss, computed in float64
// from the definition.
func vocabCEReference(x []float64, targets []int64, g []float64, w, vocab int, eps float64, ignore bool) (loss, grad []float64) {
	n := len(targets)
	loss, grad = make([]float64, n), make([]float64, n*w)
	for r, t := range targets {
		if ignore && t == -100 {
			continue
		}
		row := x[r*w : r*w+vocab]
		m := math.Inf(-1)
		for _, v := range row {
			m = max(m, v)
		}
		var s float64
		for _, v := range row {
			s += math.Exp(v - m)
		}
		logp := func(j int) float64 { return row[j] - m - math.Log(s) }
		loss[r] = -(1 - eps) * logp(int(t))
		if eps != 0 {
			for j := range row {
				loss[r] -= eps / float64(vocab) * logp(j)
			}
		}
		for j := range row {
			d := math.Exp(row[j]-m)/s - eps/float64(vocab)
			if j == int(t) {
				d -= 1 - eps
			}
			grad[r*w+j] = g[r] * d
		}
	}
	return loss, grad
}

// rankStatsReference returns the statistics VocabCrossEntropyStats must write for one
// rank's slice [start, start+width) of the logits: m, Σ e^(x−m), target logit, Σ x.
func rankStatsReference(x []float64, targets []int64, w, start, width, vocab int, ignore bool) [4][]float64 {
	n := len(targets)
	var st [4][]float64
	for i := range st {
		st[i] = make([]float64, n)
	}
	for r, t := range targets {
		if ignore && t == -100 {
			continue
		}
		m, s, sx := math.Inf(-1), 0.0, 0.0
		for j := start; j < min(start+width, vocab); j++ {
			m = max(m, x[r*w+j])
			sx += x[r*w+j]
		}
		for j := start; j < min(start+width, vocab); j++ {
			s += math.Exp(x[r*w+j] - m)
		}
		if int(t) >= start && int(t) < min(start+width, vocab) {
			st[2][r] = x[r*w+int(t)]
		}
		st[0][r], st[1][r], st[3][r] = m, s, sx
	}
	return st
}

func TestVocabCrossEntropyKernels(t *testing.T) {
	testutil.ForEachBackend(t, func(t *testing.T, dev *tensor.Device) {
		for _, c := range vocabCECases() {
			t.Run(c.name, func(t *testing.T) { checkVocabCE(t, dev, c) })
		}
	})
}

// checkVocabCE runs the three kernels on each simulated rank and compares every output
// with the references.
func checkVocabCE(t *testing.T, dev *tensor.Device, c vocabCECase) {
	x, targets, g := c.problem()
	wantLoss, wantGrad := vocabCEReference(x, targets, g, c.w, c.vocab, c.eps, c.ignore)
	be, width := dev.Backend(), c.w/c.tp
	tg := tensor.FromSlice(dev, targets, c.n)
	params := func(rank int) tensor.VocabCrossEntropyParams {
		return tensor.VocabCrossEntropyParams{Start: rank * width, Vocab: c.vocab, Ignore: c.ignore, IgnoreIndex: -100, LabelSmoothing: c.eps}
	}
	logits := make([]*tensor.Tensor, c.tp)
	global := make([]float64, 4*c.n) // M, S, target logit, Σ x
	for i := 0; i < c.n; i++ {
		global[i] = math.Inf(-1)
	}
	ranks := make([][]float64, c.tp)
	for rank := range logits {
		logits[rank] = tensor.FromSlice(dev, sliceCols(x, c.w, rank*width, width), c.n, width).Cast(c.dtype)
		st := tensor.Empty(dev, tensor.F64, 4, c.n)
		be.VocabCrossEntropyStats(st.Span(), logits[rank].Span(), tg.Span(), params(rank))
		ranks[rank] = tensor.ToSlice[float64](st)
		checkRankStats(t, ranks[rank], rankStatsReference(x, targets, c.w, rank*width, width, c.vocab, c.ignore), c)
		for i := 0; i < c.n; i++ {
			global[i] = max(global[i], ranks[rank][i])
		}
	}
	for _, st := range ranks { // rescale to the global maximum and sum
		for i := 0; i < c.n; i++ {
			if st[c.n+i] != 0 {
				global[c.n+i] += st[c.n+i] * math.Exp(st[i]-global[i])
			}
			global[2*c.n+i] += st[2*c.n+i]
			global[3*c.n+i] += st[3*c.n+i]
		}
	}
	stats := tensor.FromSlice(dev, global, 4, c.n)
	loss := tensor.Empty(dev, c.dtype, c.n)
	be.VocabCrossEntropyLoss(loss.Span(), stats.Span(), tg.Span(), params(0))
	for i, got := range tensor.ToSlice[float64](loss) {
		if !within(got, wantLoss[i], c.lossTol*math.Abs(wantLoss[i])+c.lossTol) {
			t.Errorf("row %d loss %.9g, want %.9g", i, got, wantLoss[i])
		}
	}
	dloss := tensor.FromSlice(dev, g, c.n).Cast(c.dtype)
	for rank, lg := range logits {
		dx := tensor.Empty(dev, c.dtype, c.n, width)
		be.VocabCrossEntropyBackward(dx.Span(), lg.Span(), tg.Span(), stats.Span(), dloss.Span(), params(rank))
		want := sliceCols(wantGrad, c.w, rank*width, width)
		for i, got := range tensor.ToSlice[float64](dx) {
			r, j := i/width, rank*width+i%width
			scale := math.Abs(g[r]) * (math.Abs(want[i]/g[r]) + c.eps/float64(c.vocab) + 1e-30)
			if j == int(targets[r]) {
				scale = math.Abs(g[r]) // p − 1 is formed in float64 and rounded once
			}
			if (j >= c.vocab || c.ignore && targets[r] == -100) && got != 0 {
				t.Errorf("rank %d row %d padding or ignored column %d: gradient %g, want exactly 0", rank, r, j, got)
			} else if !within(got, want[i], c.gradT*scale) {
				t.Errorf("rank %d row %d column %d: gradient %.9g, want %.9g", rank, r, j, got, want[i])
			}
		}
	}
}

// checkRankStats compares one rank's statistics with the reference: the maximum and the
// target logit exactly (they are logits), the sums within the case's tolerance.
func checkRankStats(t *testing.T, got []float64, want [4][]float64, c vocabCECase) {
	t.Helper()
	n := c.n
	for i := 0; i < n; i++ {
		m, s, xt, sx := got[i], got[n+i], got[2*n+i], got[3*n+i]
		sxTol := 1e-12 * (math.Abs(want[3][i]) + float64(c.w))
		if m != want[0][i] || xt != want[2][i] || !within(s, want[1][i], c.lossTol*want[1][i]) ||
			!(sx == want[3][i] || within(sx, want[3][i], sxTol)) {
			t.Errorf("row %d stats (m, Σe, x_t, Σx) = (%g, %.9g, %g, %g), want (%g, %.9g, %g, %g)",
				i, m, s, xt, sx, want[0][i], want[1][i], want[2][i], want[3][i])
		}
	}
}

// within reports whether |got − want| ≤ tol (infinities must match).
func within(got, want, tol float64) bool {
	if math.IsInf(want, 0) || math.IsNaN(got) {
		return got == want
	}
	return math.Abs(got-want) <= tol
}

// sliceCols returns columns [lo, lo+n) of the row-major matrix m of width w.
func sliceCols(m []float64, w, lo, n int) []float64 {
	out := make([]float64, 0, len(m)/w*n)
	for i := 0; i < len(m)/w; i++ {
		out = append(out, m[i*w+lo:i*w+lo+n]...)
	}
	return out
}

func TestVocabCrossEntropyRejectsBadTargets(t *testing.T) {
	testutil.ForEachBackend(t, func(t *testing.T, dev *tensor.Device) {
		logits := tensor.Zeros(dev, tensor.F32, 2, 8)
		st := tensor.Empty(dev, tensor.F64, 4, 2)
		for _, tc := range []struct {
			targets []int64
			p       tensor.VocabCrossEntropyParams
			bad     int64
		}{
			{[]int64{1, 6}, tensor.VocabCrossEntropyParams{Vocab: 6}, 6},
			{[]int64{-1, 0}, tensor.VocabCrossEntropyParams{Vocab: 8}, -1},
			{[]int64{-100, 0}, tensor.VocabCrossEntropyParams{Vocab: 8, IgnoreIndex: -100}, -100}, // Ignore unset
		} {
			want := fmt.Sprintf("tensor: VocabCrossEntropyStats: target %d of row %d out of range [0, %d)",
				tc.bad, slicesIndex(tc.targets, tc.bad), tc.p.Vocab)
			func() {
				defer func() {
					if r := recover(); r != want {
						t.Errorf("panic %v, want %q", r, want)
					}
				}()
				dev.Backend().VocabCrossEntropyStats(st.Span(), logits.Span(), tensor.FromSlice(dev, tc.targets, 2).Span(), tc.p)
			}()
		}
	})
}

func slicesIndex(s []int64, v int64) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}
