package tensor

import (
	"fmt"
	"math"
	"runtime"
)

// The vocabulary-parallel cross-entropy kernels (Backend.VocabCrossEntropy*).
//
// Work and summation units. Each row's class columns are cut into blocks of ceBlock
// columns. A block is one item of work: items (rows × blocks) are handed out to
// GOMAXPROCS goroutines on demand, so a batch of few long rows is split by columns too,
// and a goroutine slowed down by other load takes fewer. A block is also the unit of
// summation: the forward computes each block's maximum m_b, Σ e^(x−m_b) and Σ x (two
// passes over 16 KiB, the second from L1), then combines a row's blocks in column order
// in float64, m = max m_b and Σ e^(x−m) = Σ_b e^(m_b−m)·Σ e^(x−m_b). Results are
// therefore the same whatever GOMAXPROCS is. The backward is one pass: each block reads
// its logits and writes its gradients.
//
// Precision. F64 logits are computed in float64 (math.Exp). F32 logits (and BF16 and F16,
// widened to float32) are computed in float32 with float64 row sums: each exponential is
// e^d with d = x − m rounded to float32, evaluated in float32 (vmath_ce.go: the AVX-512
// exp is within one ulp of the correctly rounded value in the tests), and summed in
// float64 (the assembly adds pairs of terms in float32 first). The loss
// M + ln S − (1−ε)·x_t − ε·Σx/V is formed in float64 and rounded once. The rounding of
// d gives a term a relative error of up to |d|·2⁻²⁴, so a term's error is at most about
// (|d|/2 + 1)·2⁻²³ relative; the loss sees the softmax-weighted average of that (large
// |d| means a small term), in practice within about one float32 ulp of the exact loss
// for the float32 logits, as PyTorch's float32 kernels, which also subtract the maximum
// in float32. The gradient of a class column is a·e^(x−M) + b in float32 with
// a = float32(g/S) and b = float32(−g·ε/V), one fused multiply-add; the target's column,
// where p − 1 cancels, is computed in float64 and rounded once.

// ceBlock is the number of columns of a block: 16 KiB of float32 logits, which the
// forward's second pass finds in L1.
const ceBlock = 4096

// ceSerialWork is the number of logits below which the kernels do not start goroutines.
const ceSerialWork = 1 << 15

// vocabCEShape returns the rows N and width W of logits [..., W] and the number of this
// rank's class columns (those before p.Vocab).
func vocabCEShape(logits Span, p VocabCrossEntropyParams) (n, w, local int) {
	w = logits.Shape[len(logits.Shape)-1]
	n = logits.Numel() / max(w, 1)
	return n, w, max(0, min(w, p.Vocab-p.Start))
}

func (p VocabCrossEntropyParams) ignored(t int) bool { return p.Ignore && int64(t) == p.IgnoreIndex }

// vocabCETargets returns the targets as ints. It panics if one is outside [0, p.Vocab) and
// not ignored: before any goroutine starts, so the caller can recover.
func vocabCETargets(op string, targets Span, p VocabCrossEntropyParams) []int {
	ts := indices(targets)
	for r, t := range ts {
		if (t < 0 || t >= p.Vocab) && !p.ignored(t) {
			panic(fmt.Sprintf("tensor: %s: target %d of row %d out of range [0, %d)", op, t, r, p.Vocab))
		}
	}
	return ts
}

func (cpuBackend) VocabCrossEntropyStats(stats, logits, targets Span, p VocabCrossEntropyParams) {
	ts := vocabCETargets("VocabCrossEntropyStats", targets, p)
	st := raw[float64](stats)
	if computeIs64(logits.DType) {
		vocabCEStats(st, load[float64](logits), ts, logits, p)
	} else {
		vocabCEStats(st, load[float32](logits), ts, logits, p)
	}
}

// vocabCEStats is VocabCrossEntropyStats over logits xs (shaped like logits) in T.
func vocabCEStats[T float](st []float64, xs []T, ts []int, logits Span, p VocabCrossEntropyParams) {
	n, w, local := vocabCEShape(logits, p)
	nb := (local + ceBlock - 1) / ceBlock
	part := make([]float64, 3*n*nb) // per block: m_b, Σ e^(x−m_b), Σ x
	parallelItems(n*nb, n*local, func(first, end int) {
		for i := first; i < end; i++ {
			r, lo := i/nb, i%nb*ceBlock
			if !p.ignored(ts[r]) {
				row := xs[r*w : r*w+local]
				part[3*i], part[3*i+1], part[3*i+2] = blockExpStats(row[lo:min(lo+ceBlock, local)])
			}
		}
	})
	for r, t := range ts {
		m, s, sx, xt := math.Inf(-1), 0.0, 0.0, 0.0
		if p.ignored(t) {
			m = 0
		} else {
			blocks := part[3*r*nb : 3*(r+1)*nb]
			for b := 0; b < nb; b++ {
				m = max(m, blocks[3*b])
			}
			for b := 0; b < nb; b++ {
				if sb := blocks[3*b+1]; sb != 0 { // an all −Inf block adds nothing
					s += sb * math.Exp(blocks[3*b]-m)
				}
				sx += blocks[3*b+2]
			}
			if c := t - p.Start; c >= 0 && c < local {
				xt = float64(xs[r*w+c])
			}
		}
		st[r], st[n+r], st[2*n+r], st[3*n+r] = m, s, xt, sx
	}
}

// blockExpStats returns the largest element m of a block (NaN if any is NaN), Σ e^(x−m)
// (0 when every element is −Inf) and Σ x, the sums in float64.
func blockExpStats[T float](xs []T) (m, s, sx float64) {
	if x32, ok := any(xs).([]float32); ok {
		m, sx = maxSum(x32)
		if math.IsInf(m, -1) {
			return m, 0, sx
		}
		return m, expShiftSum(x32, float32(m)), sx
	}
	m = math.Inf(-1)
	for _, x := range xs {
		m = max(m, float64(x))
		sx += float64(x)
	}
	if math.IsInf(m, -1) {
		return m, 0, sx
	}
	for _, x := range xs {
		s += math.Exp(float64(x) - m)
	}
	return m, s, sx
}

func (cpuBackend) VocabCrossEntropyLoss(loss, stats, targets Span, p VocabCrossEntropyParams) {
	ts := indices(targets)
	st, out := raw[float64](stats), output[float64](loss)
	n, eps := len(ts), p.LabelSmoothing
	for r, t := range ts {
		if p.ignored(t) {
			out[r] = 0
			continue
		}
		l := st[r] + math.Log(st[n+r]) - (1-eps)*st[2*n+r]
		if eps != 0 { // Σ x is −Inf when a logit is: no smoothing must not make it NaN
			l -= eps * st[3*n+r] / float64(p.Vocab)
		}
		out[r] = l
	}
	store(loss, out)
}

func (cpuBackend) VocabCrossEntropyBackward(dlogits, logits, targets, stats, dloss Span, p VocabCrossEntropyParams) {
	ts := indices(targets)
	st, g := raw[float64](stats), load[float64](dloss)
	if computeIs64(logits.DType) {
		dxs := output[float64](dlogits)
		vocabCEBackward(dxs, load[float64](logits), ts, st, g, logits, p)
		store(dlogits, dxs)
	} else {
		dxs := output[float32](dlogits)
		vocabCEBackward(dxs, load[float32](logits), ts, st, g, logits, p)
		store(dlogits, dxs)
	}
}

// vocabCEBackward is VocabCrossEntropyBackward in T: one item per block of ceBlock
// columns of the whole width (class and padding columns).
func vocabCEBackward[T float](dxs, xs []T, ts []int, st, g []float64, logits Span, p VocabCrossEntropyParams) {
	n, w, local := vocabCEShape(logits, p)
	nb := (w + ceBlock - 1) / ceBlock
	parallelItems(n*nb, n*w, func(first, end int) {
		for i := first; i < end; i++ {
			r, lo := i/nb, i%nb*ceBlock
			hi, cls := min(lo+ceBlock, w), max(0, min(lo+ceBlock, local)-lo)
			dr, xr := dxs[r*w+lo:r*w+hi], xs[r*w+lo:r*w+hi]
			if p.ignored(ts[r]) {
				clear(dr)
				continue
			}
			clear(dr[cls:]) // padding
			vocabCEGradBlock(dr[:cls], xr[:cls], st[r], st[n+r], g[r], ts[r]-p.Start-lo, p)
		}
	})
}

// vocabCEGradBlock sets the gradient dr of a block xr of class columns of a row with
// global maximum m, Σ e^(x−m) s and loss gradient g; c is the target's column in the
// block (outside [0, len(xr)) when elsewhere). dr may be xr.
func vocabCEGradBlock[T float](dr, xr []T, m, s, g float64, c int, p VocabCrossEntropyParams) {
	eps, v := p.LabelSmoothing, float64(p.Vocab)
	target := c >= 0 && c < len(xr)
	var xc float64
	if target {
		xc = float64(xr[c]) // read before blockGrad: dr may be xr
	}
	blockGrad(dr, xr, m, g/s, -g*eps/v)
	if target {
		dr[c] = T(g * (math.Exp(xc-m)/s - eps/v - (1 - eps)))
	}
}

// blockGrad sets dx[i] = a·e^(x[i]−m) + b.
func blockGrad[T float](dx, xs []T, m, a, b float64) {
	if d32, ok := any(dx).([]float32); ok {
		expShiftAffine(d32, any(xs).([]float32), float32(m), float32(a), float32(b))
		return
	}
	for i, x := range xs[:len(dx)] {
		dx[i] = T(a*math.Exp(float64(x)-m) + b)
	}
}

// parallelItems runs body over [0, n) in chunks of contiguous items on up to GOMAXPROCS
// goroutines (runChunks, about 8 chunks a goroutine), or on the caller's goroutine when
// the whole job (work elements) is small. Items must be independent.
func parallelItems(n, work int, body func(lo, hi int)) {
	workers := min(runtime.GOMAXPROCS(0), n)
	if workers <= 1 || work < ceSerialWork {
		body(0, n)
		return
	}
	runChunks(n, max(1, n/(8*workers)), workers, body)
}
