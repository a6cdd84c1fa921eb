package tensor_test

import (
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"megago/tensor"
)

// Forward values against slow, obvious float64 references, and the autograd engine's
// behaviour (accumulation, NoGrad, Detach, custom Functions).

// f64eps is float64's unit roundoff; f32eps float32's.
const (
	f64eps = 0x1p-53
	f32eps = 0x1p-24
)

func randVals(r *rand.Rand, n int, lo, hi float64) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = lo + (hi-lo)*r.Float64()
	}
	return v
}

// roundF32 rounds each value to float32, as casting an F64 tensor to F32 does.
func roundF32(v []float64) []float64 {
	if v == nil {
		return nil
	}
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(float32(x))
	}
	return out
}

// unravel returns the multi-index of linear index i in a row-major shape.
func unravel(i int, shape []int) []int {
	idx := make([]int, len(shape))
	for d := len(shape) - 1; d >= 0; d-- {
		idx[d] = i % shape[d]
		i /= shape[d]
	}
	return idx
}

// ravel returns the linear index of idx in shape; dims of shape aligned from the right with
// idx, and of size 1, are read at 0 (NumPy broadcasting).
func ravel(idx []int, shape []int) int {
	off := len(idx) - len(shape)
	lin := 0
	for d, n := range shape {
		i := idx[d+off]
		if n == 1 {
			i = 0
		}
		lin = lin*n + i
	}
	return lin
}

// requireShape checks got's shape (an empty want is a 0-dim tensor).
func requireShape(t *testing.T, want []int, got *tensor.Tensor) {
	t.Helper()
	require.True(t, got.Shape().Equal(want), "shape %v, want %v", got.Shape(), tensor.Shape(want))
}

func requireClose(t *testing.T, want, got []float64, rtol, atol float64, what string) {
	t.Helper()
	require.Len(t, got, len(want), what)
	for i := range want {
		if want[i] == got[i] {
			continue
		}
		require.LessOrEqual(t, math.Abs(got[i]-want[i]), atol+rtol*math.Abs(want[i]),
			"%s element %d: got %.17g want %.17g", what, i, got[i], want[i])
	}
}

// refMatMul is op(a)·op(b) with MatMul's batch rules, one dot product per element.
func refMatMul(a []float64, as []int, b []float64, bs []int, ta, tb bool) ([]float64, []int, []float64) {
	ra, rb := len(as), len(bs)
	m, k := as[ra-2], as[ra-1]
	if ta {
		m, k = k, m
	}
	n := bs[rb-1]
	if tb {
		n = bs[rb-2]
	}
	batch := as[:ra-2]
	if len(bs) > len(as) {
		batch = bs[:rb-2]
	}
	nb := tensor.Shape(batch).Numel()
	aStride, bStride := 0, 0
	if ra > 2 {
		aStride = m * k
	}
	if rb > 2 {
		bStride = k * n
	}
	out := make([]float64, nb*m*n)
	absSum := make([]float64, nb*m*n) // Σ|a||b|, for the float32 error bound
	for bi := 0; bi < nb; bi++ {
		for i := 0; i < m; i++ {
			for j := 0; j < n; j++ {
				var s, sa float64
				for p := 0; p < k; p++ {
					ai := bi*aStride + i*k + p
					if ta {
						ai = bi*aStride + p*m + i
					}
					bj := bi*bStride + p*n + j
					if tb {
						bj = bi*bStride + j*k + p
					}
					s += a[ai] * b[bj]
					sa += math.Abs(a[ai] * b[bj])
				}
				out[(bi*m+i)*n+j] = s
				absSum[(bi*m+i)*n+j] = sa
			}
		}
	}
	return out, append(slices.Clone(batch), m, n), absSum
}

func TestMatMulForward(t *testing.T) {
	dev := tensor.NewCPU()
	r := rand.New(rand.NewPCG(1, 1))
	cases := []struct {
		name   string
		as, bs []int
		ta, tb bool
	}{
		{"2d", []int{5, 7}, []int{7, 3}, false, false},
		{"2d_transA", []int{7, 5}, []int{7, 3}, true, false},
		{"2d_transB", []int{5, 7}, []int{3, 7}, false, true},
		{"2d_transAB", []int{7, 5}, []int{3, 7}, true, true},
		{"batched", []int{2, 3, 5, 7}, []int{2, 3, 7, 4}, false, false},
		{"batched_transAB", []int{3, 7, 5}, []int{3, 4, 7}, true, true},
		{"shared_weight", []int{2, 3, 6}, []int{6, 4}, false, false},
		{"shared_weight_transB", []int{2, 3, 6}, []int{4, 6}, false, true},
		{"shared_weight_transA", []int{2, 6, 3}, []int{6, 4}, true, false},
		{"2d_x_batched", []int{3, 6}, []int{2, 6, 4}, false, false},
		{"2d_x_batched_transAB", []int{6, 3}, []int{2, 4, 6}, true, true},
		{"large_k", []int{4, 300}, []int{300, 5}, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := randVals(r, tensor.Shape(c.as).Numel(), -1, 1)
			b := randVals(r, tensor.Shape(c.bs).Numel(), -1, 1)
			want, shape, _ := refMatMul(a, c.as, b, c.bs, c.ta, c.tb)
			got := tensor.MatMulT(tensor.FromSlice(dev, a, c.as...), tensor.FromSlice(dev, b, c.bs...), c.ta, c.tb)
			require.Equal(t, tensor.Shape(shape), got.Shape())
			k := c.as[len(c.as)-1]
			if c.ta {
				k = c.as[len(c.as)-2]
			}
			// Same products, possibly summed in another order: ≤ k roundings of the partial sums.
			requireClose(t, want, tensor.ToSlice[float64](got), 0, float64(k)*f64eps*float64(k), "F64")

			// F32: the reference on the float32-rounded inputs, within the standard bound
			// for a k-term dot product, (k+1)·u·Σ|a||b|.
			a32, b32 := roundF32(a), roundF32(b)
			want32, _, abs := refMatMul(a32, c.as, b32, c.bs, c.ta, c.tb)
			got32 := tensor.ToSlice[float64](tensor.MatMulT(tensor.FromSlice(dev, a, c.as...).Cast(tensor.F32),
				tensor.FromSlice(dev, b, c.bs...).Cast(tensor.F32), c.ta, c.tb))
			for i := range want32 {
				require.LessOrEqual(t, math.Abs(got32[i]-want32[i]), float64(k+1)*f32eps*abs[i], "F32 element %d", i)
			}
		})
	}
}

// refSoftmax computes softmax (or log-softmax) over the last dim of x [B, H, Tq, Tk]
// scaled by scale, hiding key j from query i when causal and j > i+Tk−Tq or when
// pad[b][j] ≠ 0 (pad may be nil).
func refSoftmax(x []float64, shape []int, scale float64, causal bool, pad []int64, log bool) []float64 {
	tq, tk := shape[len(shape)-2], shape[len(shape)-1]
	rows := len(x) / tk
	perBatch := rows / shape[0]
	out := make([]float64, len(x))
	for row := 0; row < rows; row++ {
		b, i := row/perBatch, row%tq
		hidden := func(j int) bool {
			return (causal && j > i+tk-tq) || (pad != nil && pad[b*tk+j] != 0)
		}
		var z float64
		for j := 0; j < tk; j++ {
			if !hidden(j) {
				z += math.Exp(scale * x[row*tk+j])
			}
		}
		for j := 0; j < tk; j++ {
			v := math.Exp(scale*x[row*tk+j]) / z
			switch {
			case hidden(j) && log:
				v = math.Inf(-1)
			case hidden(j):
				v = 0
			case log:
				v = scale*x[row*tk+j] - math.Log(z)
			}
			out[row*tk+j] = v
		}
	}
	return out
}

func TestSoftmaxForward(t *testing.T) {
	dev := tensor.NewCPU()
	r := rand.New(rand.NewPCG(2, 2))
	// Batch 0 hides its last two keys, batch 1 all of them, so its rows are fully masked.
	pad := []int64{0, 0, 0, 1, 1, 1, 1, 1, 1, 1}
	cases := []struct {
		name   string
		shape  []int
		scale  float64
		causal bool
		pad    []int64
	}{
		{"plain", []int{2, 1, 3, 5}, 1, false, nil},
		{"scale", []int{2, 2, 3, 5}, 0.125, false, nil},
		{"causal", []int{2, 2, 5, 5}, 1, true, nil},
		{"causal_Tq<Tk", []int{2, 2, 3, 5}, 0.5, true, nil},
		{"causal_Tq>Tk_hides_whole_rows", []int{2, 1, 7, 5}, 1, true, nil},
		{"pad_mask", []int{2, 3, 4, 5}, 1, false, pad},
		{"pad_mask_causal_scale", []int{2, 3, 4, 5}, 2, true, pad},
	}
	for _, c := range cases {
		for _, log := range []bool{false, true} {
			name := c.name
			if log {
				name += "/log"
			}
			t.Run(name, func(t *testing.T) {
				x := randVals(r, tensor.Shape(c.shape).Numel(), -4, 4)
				o := tensor.SoftmaxOptions{Scale: c.scale, Causal: c.causal}
				if c.pad != nil {
					o.Mask = tensor.FromSlice(dev, c.pad, 2, 1, 1, 5)
				}
				run := func(dt tensor.DType) []float64 {
					xt := tensor.FromSlice(dev, x, c.shape...).Cast(dt)
					if log {
						return tensor.ToSlice[float64](tensor.LogSoftmax(xt, o))
					}
					return tensor.ToSlice[float64](tensor.Softmax(xt, o))
				}
				want := refSoftmax(x, c.shape, c.scale, c.causal, c.pad, log)
				requireClose(t, want, run(tensor.F64), 1e-14, 1e-15, "F64")
				// F32: inputs rounded to float32 (scale·|x| ≤ 8, so ~8u absolute in the
				// exponent) and the result rounded once.
				want32 := refSoftmax(roundF32(x), c.shape, c.scale, c.causal, c.pad, log)
				requireClose(t, want32, run(tensor.F32), 4*f32eps, 4*f32eps, "F32")
				requireClose(t, want, run(tensor.F32), 0, 32*f32eps*max(1, 8*c.scale), "F32 vs F64")
			})
		}
	}
}

// refNorm is LayerNorm (or RMSNorm when rms) of rows of length c, with optional w and b.
func refNorm(x []float64, c int, w, b []float64, eps float64, rms bool) []float64 {
	out := make([]float64, len(x))
	for r := 0; r < len(x)/c; r++ {
		row := x[r*c : (r+1)*c]
		var mean float64
		if !rms {
			for _, v := range row {
				mean += v
			}
			mean /= float64(c)
		}
		var ms float64
		for _, v := range row {
			ms += (v - mean) * (v - mean)
		}
		ms /= float64(c)
		for j, v := range row {
			y := (v - mean) / math.Sqrt(ms+eps)
			if w != nil {
				y *= w[j]
			}
			if b != nil {
				y += b[j]
			}
			out[r*c+j] = y
		}
	}
	return out
}

func TestNormForward(t *testing.T) {
	dev := tensor.NewCPU()
	r := rand.New(rand.NewPCG(3, 3))
	const c = 16
	shape := []int{2, 3, c}
	for _, rms := range []bool{false, true} {
		for _, withW := range []bool{false, true} {
			for _, offset := range []float64{0, 100} {
				name := "LayerNorm"
				if rms {
					name = "RMSNorm"
				}
				if withW {
					name += "/w"
				}
				if offset != 0 {
					name += "/offset100"
				}
				t.Run(name, func(t *testing.T) {
					x := randVals(r, 6*c, offset-2, offset+2)
					var w, b []float64
					if withW {
						w = randVals(r, c, 0.5, 1.5)
						if !rms {
							b = randVals(r, c, -1, 1)
						}
					}
					const eps = 1e-5
					run := func(dt tensor.DType) []float64 {
						xt := tensor.FromSlice(dev, x, shape...).Cast(dt)
						var wt, bt *tensor.Tensor
						if w != nil {
							wt = tensor.FromSlice(dev, w).Cast(dt)
						}
						if b != nil {
							bt = tensor.FromSlice(dev, b).Cast(dt)
						}
						if rms {
							return tensor.ToSlice[float64](tensor.RMSNorm(xt, wt, eps))
						}
						return tensor.ToSlice[float64](tensor.LayerNorm(xt, wt, bt, eps))
					}
					want := refNorm(x, c, w, b, eps, rms)
					requireClose(t, want, run(tensor.F64), 1e-12, 1e-12, "F64")
					// F32 rounds the inputs: relative u on x-mean is amplified by
					// |x|/std ≤ ~100/1 when offset.
					want32 := refNorm(roundF32(x), c, roundF32(w), roundF32(b), eps, rms)
					requireClose(t, want32, run(tensor.F32), 8*f32eps, 8*f32eps, "F32")
				})
			}
		}
	}
}

// refCrossEntropy is PyTorch's cross_entropy with label smoothing ε: per row
// (1−ε)·(−log p_t) + ε·mean_j(−log p_j); ignored rows (target == ignore, when hasIgnore)
// give 0 and are left out of the mean.
func refCrossEntropy(x []float64, v int, tgt []int64, eps float64, hasIgnore bool, ignore int64) (rows []float64, mean float64) {
	rows = make([]float64, len(tgt))
	var sum float64
	count := 0
	for r, t := range tgt {
		if hasIgnore && t == ignore {
			continue
		}
		row := x[r*v : (r+1)*v]
		var z float64
		for _, a := range row {
			z += math.Exp(a)
		}
		logp := func(j int) float64 { return row[j] - math.Log(z) }
		var smooth float64
		for j := range row {
			smooth -= logp(j)
		}
		smooth /= float64(v)
		rows[r] = (1-eps)*(-logp(int(t))) + eps*smooth
		sum += rows[r]
		count++
	}
	if count > 0 {
		mean = sum / float64(count)
	}
	return rows, mean
}

func TestCrossEntropyForward(t *testing.T) {
	dev := tensor.NewCPU()
	r := rand.New(rand.NewPCG(4, 4))
	cases := []struct {
		name      string
		shape     []int // logits
		tgt       []int64
		eps       float64
		hasIgnore bool
		ignore    int64
	}{
		{"plain", []int{4, 7}, []int64{0, 6, 3, 3}, 0, false, 0},
		{"label_smoothing", []int{4, 7}, []int64{0, 6, 3, 3}, 0.1, false, 0},
		{"ignore_-100", []int{4, 7}, []int64{-100, 6, -100, 2}, 0.2, true, -100},
		{"ignore_in_range", []int{4, 7}, []int64{1, 6, 1, 2}, 0, true, 1},
		{"3d", []int{2, 3, 7}, []int64{0, 1, 2, 3, 4, 5}, 0.1, false, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := c.shape[len(c.shape)-1]
			x := randVals(r, tensor.Shape(c.shape).Numel(), -3, 3)
			rows, mean := refCrossEntropy(x, v, c.tgt, c.eps, c.hasIgnore, c.ignore)
			tshape := c.shape[:len(c.shape)-1]
			var sum float64
			for _, l := range rows {
				sum += l
			}
			for _, dt := range []tensor.DType{tensor.F64, tensor.F32} {
				tol := 1e-14 // F64: log-sum-exp of 7 terms
				if dt == tensor.F32 {
					tol = 1e-6 // logits rounded to float32 (|x| ≤ 3: 3u), one float32 rounding
				}
				loss := func(red tensor.Reduction) *tensor.Tensor {
					return tensor.CrossEntropy(tensor.FromSlice(dev, x, c.shape...).Cast(dt), tensor.FromSlice(dev, c.tgt, tshape...),
						tensor.CrossEntropyOptions{LabelSmoothing: c.eps, Ignore: c.hasIgnore, IgnoreIndex: c.ignore, Reduction: red})
				}
				none := loss(tensor.ReduceNone)
				require.Equal(t, tensor.Shape(tshape), none.Shape())
				requireClose(t, rows, tensor.ToSlice[float64](none), tol, tol, dt.String()+" none")
				assert.InDelta(t, mean, loss(tensor.ReduceMeanLoss).Item(), tol*4, "%v mean", dt)
				assert.InDelta(t, sum, loss(tensor.ReduceSumLoss).Item(), tol*4*float64(len(rows)), "%v sum", dt)
			}
		})
	}
}

// TestCrossEntropyKnownValue checks a value worked out by hand: for logits [1, 2, 3] and
// target 2, lse = 3 + ln(1 + e⁻¹ + e⁻²), nll = lse − 3, and the smoothing term is
// mean_j(lse − x_j) = lse − 2, so with ε = 0.1 the loss is nll + ε·1.
func TestCrossEntropyKnownValue(t *testing.T) {
	dev := tensor.NewCPU()
	lse := 3 + math.Log(1+math.Exp(-1)+math.Exp(-2))
	got := tensor.CrossEntropy(tensor.FromSlice(dev, []float64{1, 2, 3}, 1, 3), tensor.FromSlice(dev, []int64{2}),
		tensor.CrossEntropyOptions{LabelSmoothing: 0.1}).Item()
	assert.InDelta(t, lse-3+0.1, got, 1e-15)
	// Two equal logits: ln 2 whatever the smoothing.
	got = tensor.CrossEntropy(tensor.FromSlice(dev, []float64{0.5, 0.5}, 1, 2), tensor.FromSlice(dev, []int64{0}),
		tensor.CrossEntropyOptions{LabelSmoothing: 0.3}).Item()
	assert.InDelta(t, math.Ln2, got, 1e-15)
}

func TestUnaryForward(t *testing.T) {
	dev := tensor.NewCPU()
	r := rand.New(rand.NewPCG(5, 5))
	gelu := func(x float64) float64 {
		return 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x)))
	}
	cases := []struct {
		name   string
		op     func(*tensor.Tensor) *tensor.Tensor
		ref    func(float64) float64
		lo, hi float64
	}{
		{"GeLU_tanh", tensor.GeLU, gelu, -5, 5},
		{"GeLUErf", tensor.GeLUErf, func(x float64) float64 { return x * 0.5 * math.Erfc(-x/math.Sqrt2) }, -5, 5},
		{"SiLU", tensor.SiLU, func(x float64) float64 { return x * (1 / (1 + math.Exp(-x))) }, -5, 5},
		{"Sigmoid", tensor.Sigmoid, func(x float64) float64 { return 0.5 + 0.5*math.Tanh(x/2) }, -8, 8},
		{"ReLU", tensor.ReLU, func(x float64) float64 { return max(x, 0) }, -2, 2},
		{"Tanh", tensor.Tanh, math.Tanh, -3, 3},
		{"Exp", tensor.Exp, math.Exp, -3, 3},
		{"Log", tensor.Log, math.Log, 0.01, 10},
		{"Sqrt", tensor.Sqrt, math.Sqrt, 0, 10},
		{"Neg", tensor.Neg, func(x float64) float64 { return -x }, -3, 3},
		{"AddScalar", func(x *tensor.Tensor) *tensor.Tensor { return tensor.AddScalar(x, 1.25) }, func(x float64) float64 { return x + 1.25 }, -3, 3},
		{"Scale", func(x *tensor.Tensor) *tensor.Tensor { return tensor.Scale(x, -0.75) }, func(x float64) float64 { return x * -0.75 }, -3, 3},
		{"Pow", func(x *tensor.Tensor) *tensor.Tensor { return tensor.Pow(x, 1.5) }, func(x float64) float64 { return x * math.Sqrt(x) }, 0, 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			x := randVals(r, 200, c.lo, c.hi)
			want := make([]float64, len(x))
			for i, v := range x {
				want[i] = c.ref(v)
			}
			got := tensor.ToSlice[float64](c.op(tensor.FromSlice(dev, x)))
			requireClose(t, want, got, 8*f64eps, 4*f64eps, "F64") // the reference's own formula rounds differently

			// F32: within one float32 ulp (plus the reference's float64 rounding) of the
			// exact function of the float32 input.
			x32 := roundF32(x)
			got32 := tensor.ToSlice[float32](c.op(tensor.FromSlice(dev, x32).Cast(tensor.F32)))
			for i, v := range x32 {
				w := c.ref(v)
				ulp := math.Abs(float64(math.Nextafter32(float32(w), float32(math.Inf(1)))) - float64(float32(w)))
				require.LessOrEqual(t, math.Abs(float64(got32[i])-w), ulp+1e-15, "F32 element %d x=%v", i, v)
			}
		})
	}
	// Known values: Φ(1) = 0.841344746068543, and the tanh form at 1.
	one := tensor.FromSlice(dev, []float64{1})
	assert.InDelta(t, 0.8413447460685429, tensor.GeLUErf(one).Item(), 1e-16)
	assert.InDelta(t, 0.8411919906082768, tensor.GeLU(one).Item(), 1e-16)
	assert.Equal(t, 0.0, tensor.ReLU(tensor.FromSlice(dev, []float64{-0.0})).Item())
}

func TestBinaryBroadcastForward(t *testing.T) {
	dev := tensor.NewCPU()
	r := rand.New(rand.NewPCG(6, 6))
	ops := []struct {
		name string
		op   func(a, b *tensor.Tensor) *tensor.Tensor
		ref  func(a, b float64) float64
	}{
		{"Add", tensor.Add, func(a, b float64) float64 { return a + b }},
		{"Sub", tensor.Sub, func(a, b float64) float64 { return a - b }},
		{"Mul", tensor.Mul, func(a, b float64) float64 { return a * b }},
		{"Div", tensor.Div, func(a, b float64) float64 { return a / b }},
	}
	shapes := []struct{ a, b, out []int }{
		{[]int{2, 3, 4}, []int{2, 3, 4}, []int{2, 3, 4}},
		{[]int{2, 3, 4}, []int{4}, []int{2, 3, 4}},
		{[]int{4}, []int{2, 3, 4}, []int{2, 3, 4}},
		{[]int{2, 1, 4}, []int{3, 1}, []int{2, 3, 4}},
		{[]int{3, 1}, []int{1, 4}, []int{3, 4}},
		{[]int{}, []int{2, 3}, []int{2, 3}},
		{[]int{2, 3}, []int{}, []int{2, 3}},
		{[]int{}, []int{}, []int{}},
		{[]int{5, 1, 1, 2}, []int{1, 3, 1}, []int{5, 1, 3, 2}},
		{[]int{1, 1}, []int{3, 1, 1}, []int{3, 1, 1}},
	}
	for _, o := range ops {
		for _, s := range shapes {
			name := o.name + "/" + tensor.Shape(s.a).String() + "_" + tensor.Shape(s.b).String()
			t.Run(name, func(t *testing.T) {
				a := randVals(r, tensor.Shape(s.a).Numel(), -2, 2)
				b := randVals(r, tensor.Shape(s.b).Numel(), 0.5, 2)
				n := tensor.Shape(s.out).Numel()
				want := make([]float64, n)
				want32 := make([]float32, n)
				for i := range want {
					idx := unravel(i, s.out)
					x, y := a[ravel(idx, s.a)], b[ravel(idx, s.b)]
					want[i] = o.ref(x, y)
					want32[i] = float32(o.ref(float64(float32(x)), float64(float32(y)))) // IEEE: correctly rounded
				}
				mk := func(v []float64, shape []int) *tensor.Tensor {
					if len(shape) == 0 {
						return tensor.Scalar(dev, tensor.F64, v[0])
					}
					return tensor.FromSlice(dev, v, shape...)
				}
				got := o.op(mk(a, s.a), mk(b, s.b))
				requireShape(t, s.out, got)
				require.Equal(t, want, tensor.ToSlice[float64](got))
				got32 := o.op(mk(a, s.a).Cast(tensor.F32), mk(b, s.b).Cast(tensor.F32))
				require.Equal(t, want32, tensor.ToSlice[float32](got32))
			})
		}
	}
}

func TestPermuteForward(t *testing.T) {
	dev := tensor.NewCPU()
	shape := []int{2, 3, 4, 5}
	x := tensor.Arange(dev, tensor.F64, 0, 1, 120).Reshape(shape...)
	for _, dt := range []tensor.DType{tensor.F64, tensor.F32, tensor.BF16, tensor.I32} {
		for _, perm := range [][]int{{0, 1, 2, 3}, {3, 2, 1, 0}, {1, 3, 0, 2}, {0, 2, 1, 3}, {2, 0, 3, 1}} {
			t.Run(dt.String()+"/"+tensor.Shape(perm).String(), func(t *testing.T) {
				got := x.Cast(dt).Permute(perm...)
				out := make([]int, 4)
				for i, p := range perm {
					out[i] = shape[p]
				}
				require.Equal(t, tensor.Shape(out), got.Shape())
				vals := tensor.ToSlice[float64](got)
				for i, v := range vals {
					oi := unravel(i, out)
					src := make([]int, 4)
					for d, p := range perm {
						src[p] = oi[d]
					}
					require.Equal(t, float64(ravel(src, shape)), v, "element %v", oi)
				}
			})
		}
	}
	tr := tensor.ToSlice[float64](x.Transpose(1, -1)) // [2, 5, 4, 3]
	for i, v := range tr {
		o := unravel(i, []int{2, 5, 4, 3})
		require.Equal(t, float64(ravel([]int{o[0], o[3], o[2], o[1]}, shape)), v)
	}
}

// Permutes large enough to be split across goroutines, keeping the last dim (row copies)
// or moving it (element by element).
func TestPermuteLarge(t *testing.T) {
	dev := tensor.NewCPU()
	shape := []int{4, 64, 8, 33}
	n := 4 * 64 * 8 * 33
	x := tensor.Arange(dev, tensor.F32, 0, 1, n).Reshape(shape...)
	for _, perm := range [][]int{{0, 2, 1, 3}, {0, 1, 3, 2}, {3, 1, 2, 0}} {
		out := make([]int, 4)
		for i, p := range perm {
			out[i] = shape[p]
		}
		vals := tensor.ToSlice[float32](x.Permute(perm...))
		for i, v := range vals {
			oi := unravel(i, out)
			src := make([]int, 4)
			for d, p := range perm {
				src[p] = oi[d]
			}
			if want := float32(ravel(src, shape)); v != want {
				t.Fatalf("perm %v element %v = %v, want %v", perm, oi, v, want)
			}
		}
	}
}

func TestConcatSplitNarrowForward(t *testing.T) {
	dev := tensor.NewCPU()
	r := rand.New(rand.NewPCG(7, 7))
	for _, dim := range []int{0, 1, 2} {
		t.Run("Concat/dim"+string(rune('0'+dim)), func(t *testing.T) {
			sizes := []int{2, 1, 3}
			parts := make([][]float64, 3)
			shapes := make([][]int, 3)
			ts := make([]*tensor.Tensor, 3)
			for i, s := range sizes {
				shapes[i] = []int{2, 3, 4}
				shapes[i][dim] = s
				parts[i] = randVals(r, tensor.Shape(shapes[i]).Numel(), -1, 1)
				ts[i] = tensor.FromSlice(dev, parts[i], shapes[i]...)
			}
			out := []int{2, 3, 4}
			out[dim] = 6
			got := tensor.Concat(dim, ts...)
			require.Equal(t, tensor.Shape(out), got.Shape())
			vals := tensor.ToSlice[float64](got)
			for i, v := range vals {
				idx := unravel(i, out)
				p, at := 0, idx[dim]
				for at >= sizes[p] {
					at -= sizes[p]
					p++
				}
				idx[dim] = at
				require.Equal(t, parts[p][ravel(idx, shapes[p])], v, "element %v", unravel(i, out))
			}
			// Split undoes Concat; Narrow picks the same parts.
			for i, s := range tensor.Split(got, dim, sizes...) {
				require.Equal(t, parts[i], tensor.ToSlice[float64](s))
			}
			require.Equal(t, parts[2], tensor.ToSlice[float64](got.Narrow(dim, 3, 3)))
			for i, c := range tensor.Chunk(got, 2, dim) {
				require.Equal(t, tensor.ToSlice[float64](got.Narrow(dim, 3*i, 3)), tensor.ToSlice[float64](c))
			}
		})
	}
	t.Run("Narrow_view_shares_storage", func(t *testing.T) {
		x := tensor.Arange(dev, tensor.F64, 0, 1, 12).Reshape(1, 4, 3)
		v := x.Narrow(1, 1, 2)
		require.Equal(t, []float64{3, 4, 5, 6, 7, 8}, tensor.ToSlice[float64](v))
		x.CopyFrom(tensor.Zeros(dev, tensor.F64, 1, 4, 3))
		require.Equal(t, make([]float64, 6), tensor.ToSlice[float64](v), "a view sees writes to its base")
	})
}

func TestIndexingForward(t *testing.T) {
	dev := tensor.NewCPU()
	x := tensor.FromSlice(dev, []float64{3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8}, 3, 4)
	t.Run("Gather", func(t *testing.T) {
		g := tensor.Gather(x, 1, tensor.FromSlice(dev, []int64{3, 0, 0, 2, 1, 1}, 3, 2))
		assert.Equal(t, []float64{1, 3, 5, 2, 3, 3}, tensor.ToSlice[float64](g))
		g = tensor.Gather(x, 0, tensor.FromSlice(dev, []int32{2, 0, 1, 2}, 1, 4))
		assert.Equal(t, []float64{5, 1, 2, 8}, tensor.ToSlice[float64](g))
	})
	t.Run("Embedding", func(t *testing.T) {
		e := tensor.Embedding(x, tensor.FromSlice(dev, []int64{2, 0, 2, 1}, 2, 2))
		require.Equal(t, tensor.Shape{2, 2, 4}, e.Shape())
		assert.Equal(t, []float64{5, 3, 5, 8, 3, 1, 4, 1, 5, 3, 5, 8, 5, 9, 2, 6}, tensor.ToSlice[float64](e))
	})
	t.Run("Max_first_of_ties", func(t *testing.T) {
		v, i := tensor.Max(x, 1)
		assert.Equal(t, []float64{4, 9, 8}, tensor.ToSlice[float64](v))
		assert.Equal(t, []int64{2, 1, 3}, tensor.ToSlice[int64](i))
		v, i = tensor.Max(x, 0) // column 0 is 3, 5, 5: the first 5 wins
		assert.Equal(t, []float64{5, 9, 5, 8}, tensor.ToSlice[float64](v))
		assert.Equal(t, []int64{1, 1, 2, 2}, tensor.ToSlice[int64](i))
	})
	t.Run("Where_MaskedFill", func(t *testing.T) {
		cond := tensor.FromSlice(dev, []int64{1, 0, 0, 1}, 4)
		w := tensor.Where(cond, x, tensor.Scalar(dev, tensor.F64, -1))
		assert.Equal(t, []float64{3, -1, -1, 1, 5, -1, -1, 6, 5, -1, -1, 8}, tensor.ToSlice[float64](w))
		m := tensor.MaskedFill(x, tensor.FromSlice(dev, []float64{0, 1, 0}, 3, 1), 7)
		assert.Equal(t, []float64{3, 1, 4, 1, 7, 7, 7, 7, 5, 3, 5, 8}, tensor.ToSlice[float64](m))
	})
	t.Run("Sum_Mean", func(t *testing.T) {
		assert.Equal(t, 52.0, tensor.Sum(x).Item())
		assert.Equal(t, []float64{13, 13, 11, 15}, tensor.ToSlice[float64](tensor.Sum(x, 0)))
		assert.Equal(t, []float64{2.25, 5.5, 5.25}, tensor.ToSlice[float64](tensor.Mean(x, -1)))
		k := tensor.MeanKeepDim(x.Reshape(3, 2, 2), 0, 2)
		require.Equal(t, tensor.Shape{1, 2, 1}, k.Shape())
		assert.InDeltaSlice(t, []float64{(3 + 1 + 5 + 9 + 5 + 3) / 6.0, (4 + 1 + 2 + 6 + 5 + 8) / 6.0}, tensor.ToSlice[float64](k), 1e-15)
		requireShape(t, nil, tensor.Sum(x, 0, 1))
		require.Equal(t, tensor.Shape{1, 1}, tensor.SumKeepDim(x).Shape())
	})
	t.Run("Expand", func(t *testing.T) {
		e := tensor.FromSlice(dev, []float64{1, 2}, 2, 1).Expand(3, 2, 2)
		assert.Equal(t, []float64{1, 1, 2, 2, 1, 1, 2, 2, 1, 1, 2, 2}, tensor.ToSlice[float64](e))
	})
}

// TestDropoutValues checks dropout's definition: each element is 0 or x/(1−p), and the
// mask is the Dropout distribution of Random.
func TestDropoutValues(t *testing.T) {
	dev := tensor.NewCPU()
	const p = 0.25
	rng := tensor.NewRNG(11)
	x := tensor.FromSlice(dev, randVals(rand.New(rand.NewPCG(8, 8)), 1000, 0.5, 1.5), 10, 100)
	y := tensor.ToSlice[float64](tensor.Dropout(x, p, rng))
	mask := tensor.ToSlice[float64](tensor.Random(dev, tensor.F64, rng, tensor.DistDropout, p, 0, tensor.Whole(10, 100)))
	xs := tensor.ToSlice[float64](x)
	zeros := 0
	for i, v := range y {
		if v == 0 {
			zeros++
			require.Equal(t, 0.0, mask[i])
			continue
		}
		require.InEpsilon(t, xs[i]/(1-p), v, 2*f64eps, "element %d", i)
	}
	assert.InDelta(t, p*1000, float64(zeros), 5*math.Sqrt(1000*p*(1-p))) // 5 standard deviations
	require.Same(t, x, tensor.Dropout(x, 0, rng), "p = 0 returns x")
}

// Autograd behaviour.

func TestGradAccumulatesAcrossBackward(t *testing.T) {
	dev := tensor.NewCPU()
	x := tensor.FromSlice(dev, []float64{1, -2, 3}).SetRequiresGrad(true)
	for range 2 {
		tensor.Sum(tensor.Mul(x, x)).Backward() // d/dx Σx² = 2x
	}
	assert.Equal(t, []float64{4, -8, 12}, tensor.ToSlice[float64](x.Grad()))
	x.ZeroGrad()
	assert.Equal(t, []float64{0, 0, 0}, tensor.ToSlice[float64](x.Grad()))
	tensor.Sum(x).Backward()
	assert.Equal(t, []float64{1, 1, 1}, tensor.ToSlice[float64](x.Grad()))
	x.SetGrad(nil)
	assert.Nil(t, x.Grad())
}

func TestBackwardWithGradNonScalar(t *testing.T) {
	dev := tensor.NewCPU()
	x := tensor.FromSlice(dev, []float64{1, 2, 3, 4}, 2, 2).SetRequiresGrad(true)
	y := tensor.Scale(tensor.Exp(x), 2) // dy/dx = 2eˣ
	y.BackwardWithGrad(tensor.FromSlice(dev, []float64{1, 0, -1, 0.5}, 2, 2))
	want := []float64{2 * math.E, 0, -2 * math.Exp(3), math.Exp(4)}
	assert.InDeltaSlice(t, want, tensor.ToSlice[float64](x.Grad()), 1e-13)
}

func TestMultiOutputBackward(t *testing.T) {
	dev := tensor.NewCPU()
	x := tensor.FromSlice(dev, []float64{1, 2}).SetRequiresGrad(true)
	a, b := tensor.Scale(x, 3), tensor.Mul(x, x)
	tensor.Backward([]*tensor.Tensor{a, b}, []*tensor.Tensor{tensor.Ones(dev, tensor.F64, 2), tensor.Ones(dev, tensor.F64, 2)})
	assert.Equal(t, []float64{5, 7}, tensor.ToSlice[float64](x.Grad())) // 3 + 2x
}

func TestNoGradRecordsNothing(t *testing.T) {
	dev := tensor.NewCPU()
	x := tensor.FromSlice(dev, []float64{1, 2}).SetRequiresGrad(true)
	var y *tensor.Tensor
	dev.NoGrad(func() {
		require.False(t, dev.GradEnabled())
		y = tensor.Sum(tensor.Mul(x, x))
	})
	require.True(t, dev.GradEnabled())
	assert.False(t, y.RequiresGrad())
	assert.True(t, y.IsLeaf())
	y.Backward() // nothing to do
	assert.Nil(t, x.Grad())

	c := tensor.FromSlice(dev, []float64{1, 2}) // no input requires grad
	z := tensor.Exp(c)
	assert.False(t, z.RequiresGrad())
	assert.True(t, z.IsLeaf())
}

// A stage of a pipeline receives its input as a leaf that requires grad and hands its
// gradient to the previous stage.
func TestLeafInputGetsGrad(t *testing.T) {
	dev := tensor.NewCPU()
	w := tensor.FromSlice(dev, []float64{1, 2, 3, 4, 5, 6}, 3, 2).SetRequiresGrad(true)
	x := tensor.FromSlice(dev, []float64{1, -1, 2, 0.5, 0, 1}, 2, 3).SetRequiresGrad(true)
	y := tensor.MatMul(x, w) // [2, 2]
	dy := tensor.FromSlice(dev, []float64{1, 2, 3, 4}, 2, 2)
	y.BackwardWithGrad(dy)
	// dx = dy·wᵀ, dw = xᵀ·dy
	assert.Equal(t, []float64{5, 11, 17, 11, 25, 39}, tensor.ToSlice[float64](x.Grad()))
	assert.Equal(t, []float64{2.5, 4, -1, -2, 5, 8}, tensor.ToSlice[float64](w.Grad()))
	assert.Nil(t, y.Grad(), "a non-leaf keeps no gradient")
}

func TestDiamondGraph(t *testing.T) {
	dev := tensor.NewCPU()
	x := tensor.FromSlice(dev, []float64{0.5, -1, 2}).SetRequiresGrad(true)
	// y = Σ (x·eˣ + x² + tanh x); dy/dx = eˣ(1+x) + 2x + 1 − tanh² x
	e := tensor.Exp(x)
	y := tensor.Sum(tensor.Add(tensor.Add(tensor.Mul(x, e), tensor.Mul(x, x)), tensor.Tanh(x)))
	y.Backward()
	for i, v := range []float64{0.5, -1, 2} {
		want := math.Exp(v)*(1+v) + 2*v + 1 - math.Tanh(v)*math.Tanh(v)
		assert.InDelta(t, want, tensor.ToSlice[float64](x.Grad())[i], 1e-14)
	}
}

func TestDetach(t *testing.T) {
	dev := tensor.NewCPU()
	x := tensor.FromSlice(dev, []float64{1, 2, 3}).SetRequiresGrad(true)
	d := x.Detach()
	assert.False(t, d.RequiresGrad())
	tensor.Sum(tensor.Mul(x, d)).Backward() // the detached factor is a constant: grad x
	assert.Equal(t, []float64{1, 2, 3}, tensor.ToSlice[float64](x.Grad()))
	// Detach shares storage.
	x.Detach().CopyFrom(tensor.Zeros(dev, tensor.F64, 3))
	assert.Equal(t, []float64{0, 0, 0}, tensor.ToSlice[float64](d))
}

func TestCastGradDType(t *testing.T) {
	dev := tensor.NewCPU()
	x := tensor.FromSlice(dev, []float32{1, 2}).SetRequiresGrad(true)
	tensor.Sum(tensor.Mul(x.Cast(tensor.F64), tensor.FromSlice(dev, []float64{3, 4}))).Backward()
	require.Equal(t, tensor.F32, x.Grad().DType())
	assert.Equal(t, []float32{3, 4}, tensor.ToSlice[float32](x.Grad()))
	// No gradient through an integer cast.
	assert.False(t, x.Cast(tensor.I64).RequiresGrad())
}

// square is a custom Function: y = x², dy/dx = 2x.
type square struct{ x *tensor.Tensor }

func (s *square) Forward(in []*tensor.Tensor) []*tensor.Tensor {
	s.x = in[0]
	return []*tensor.Tensor{tensor.Mul(in[0], in[0])}
}

func (s *square) Backward(gy []*tensor.Tensor) []*tensor.Tensor {
	return []*tensor.Tensor{tensor.Mul(gy[0], tensor.Scale(s.x, 2))}
}

// sumAndDiff has two outputs, a+b and a−b, and records the gradients it receives (their
// values: the tensors are valid only during Backward).
type sumAndDiff struct{ got [][]float64 }

func (f *sumAndDiff) Forward(in []*tensor.Tensor) []*tensor.Tensor {
	return []*tensor.Tensor{tensor.Add(in[0], in[1]), tensor.Sub(in[0], in[1])}
}

func (f *sumAndDiff) Backward(gy []*tensor.Tensor) []*tensor.Tensor {
	for _, g := range gy {
		f.got = append(f.got, tensor.ToSlice[float64](g))
	}
	return []*tensor.Tensor{tensor.Add(gy[0], gy[1]), tensor.Sub(gy[0], gy[1])}
}

// identity returns its input: Apply must still give it a node of its own.
type identity struct{}

func (identity) Forward(in []*tensor.Tensor) []*tensor.Tensor  { return in }
func (identity) Backward(gy []*tensor.Tensor) []*tensor.Tensor { return gy }

func TestApply(t *testing.T) {
	dev := tensor.NewCPU()
	t.Run("custom_square", func(t *testing.T) {
		x := tensor.FromSlice(dev, []float64{1, -2, 3}).SetRequiresGrad(true)
		y := tensor.Apply("square", &square{}, x)[0]
		assert.False(t, y.IsLeaf())
		assert.Equal(t, []float64{1, 4, 9}, tensor.ToSlice[float64](y))
		tensor.Sum(tensor.Scale(y, 0.5)).Backward()
		assert.Equal(t, []float64{1, -2, 3}, tensor.ToSlice[float64](x.Grad()))
	})
	t.Run("custom_square_gradcheck", func(t *testing.T) {
		gradCheck(t, func(xs []*tensor.Tensor) *tensor.Tensor {
			return tensor.Tanh(tensor.Apply("square", &square{}, xs[0])[0])
		}, tensor.FromSlice(dev, []float64{0.3, -0.7, 1.1}, 3))
	})
	t.Run("multi_output_one_used", func(t *testing.T) {
		a := tensor.FromSlice(dev, []float64{1, 2}).SetRequiresGrad(true)
		b := tensor.FromSlice(dev, []float64{3, 4}).SetRequiresGrad(true)
		f := &sumAndDiff{}
		outs := tensor.Apply("sumAndDiff", f, a, b)
		tensor.Sum(tensor.Scale(outs[1], 2)).Backward() // only a−b is used
		require.Len(t, f.got, 2)
		require.NotNil(t, f.got[0], "the unused output gets a zero gradient, not nil")
		assert.Equal(t, []float64{0, 0}, f.got[0])
		assert.Equal(t, []float64{2, 2}, f.got[1])
		assert.Equal(t, []float64{2, 2}, tensor.ToSlice[float64](a.Grad()))
		assert.Equal(t, []float64{-2, -2}, tensor.ToSlice[float64](b.Grad()))
	})
	t.Run("output_is_input", func(t *testing.T) {
		x := tensor.FromSlice(dev, []float64{1, 2}).SetRequiresGrad(true)
		y := tensor.Apply("identity", identity{}, x)[0]
		require.NotSame(t, x, y)
		assert.True(t, x.IsLeaf(), "the input stays a leaf")
		tensor.Sum(tensor.Mul(y, y)).Backward()
		assert.Equal(t, []float64{2, 4}, tensor.ToSlice[float64](x.Grad()))
	})
	t.Run("no_grad_inputs", func(t *testing.T) {
		x := tensor.FromSlice(dev, []float64{1, 2})
		y := tensor.Apply("square", &square{}, x)[0]
		assert.False(t, y.RequiresGrad())
	})
}

// TestParallelSplitsAgree runs kernels on sizes large enough for the CPU backend to split
// rows across goroutines, with one and with several threads: the results must be
// identical, and match the references.
func TestParallelSplitsAgree(t *testing.T) {
	dev := tensor.NewCPU()
	r := rand.New(rand.NewPCG(9, 9))
	const rows, cols = 64, 256
	x := randVals(r, rows*cols, -3, 3)
	w := randVals(r, cols*48, -1, 1)
	tgt := make([]int64, rows)
	for i := range tgt {
		tgt[i] = int64(r.IntN(cols))
	}
	ops := []struct {
		name string
		f    func(x, w *tensor.Tensor) *tensor.Tensor
		ref  func() []float64
		tol  float64
	}{
		{"MatMul", func(x, w *tensor.Tensor) *tensor.Tensor { return tensor.MatMul(x, w) }, func() []float64 {
			v, _, _ := refMatMul(x, []int{rows, cols}, w, []int{cols, 48}, false, false)
			return v
		}, 1e-12},
		{"MatMulT", func(x, w *tensor.Tensor) *tensor.Tensor { return tensor.MatMulT(w, x, true, true) }, func() []float64 {
			v, _, _ := refMatMul(w, []int{cols, 48}, x, []int{rows, cols}, true, true)
			return v
		}, 1e-12},
		{"Softmax_causal", func(x, _ *tensor.Tensor) *tensor.Tensor {
			return tensor.Softmax(x.Reshape(1, 1, rows, cols), tensor.SoftmaxOptions{Causal: true, Scale: 0.5})
		}, func() []float64 { return refSoftmax(x, []int{1, 1, rows, cols}, 0.5, true, nil, false) }, 1e-14},
		{"LayerNorm", func(x, _ *tensor.Tensor) *tensor.Tensor { return tensor.LayerNorm(x, nil, nil, 1e-5) },
			func() []float64 { return refNorm(x, cols, nil, nil, 1e-5, false) }, 1e-12},
		{"CrossEntropy", func(x, _ *tensor.Tensor) *tensor.Tensor {
			return tensor.CrossEntropy(x, tensor.FromSlice(dev, tgt), tensor.CrossEntropyOptions{LabelSmoothing: 0.1, Reduction: tensor.ReduceNone})
		}, func() []float64 { v, _ := refCrossEntropy(x, cols, tgt, 0.1, false, 0); return v }, 1e-13},
		// Elementwise kernels split only above 2^14 (unary) or 2^15 (binary) elements.
		{"GeLU", func(x, _ *tensor.Tensor) *tensor.Tensor { return tensor.GeLU(tensor.Concat(0, x, x, x, x)) }, nil, 0},
		{"Mul", func(x, _ *tensor.Tensor) *tensor.Tensor { x = tensor.Concat(0, x, x, x, x); return tensor.Mul(x, x) }, nil, 0},
		{"Softmax_backward", func(x, _ *tensor.Tensor) *tensor.Tensor {
			x = x.Detach().SetRequiresGrad(true)
			tensor.Softmax(x, tensor.SoftmaxOptions{}).BackwardWithGrad(x.Detach())
			return x.Grad()
		}, nil, 0},
		{"LayerNorm_backward", func(x, _ *tensor.Tensor) *tensor.Tensor {
			x = x.Detach().SetRequiresGrad(true)
			tensor.LayerNorm(x, nil, nil, 1e-5).BackwardWithGrad(x.Detach())
			return x.Grad()
		}, nil, 0},
	}
	for _, o := range ops {
		t.Run(o.name, func(t *testing.T) {
			for _, dt := range []tensor.DType{tensor.F64, tensor.F32} {
				run := func(procs int) []float64 {
					defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
					xt := tensor.FromSlice(dev, x, rows, cols).Cast(dt)
					wt := tensor.FromSlice(dev, w, cols, 48).Cast(dt)
					return tensor.ToSlice[float64](o.f(xt, wt))
				}
				one, many := run(1), run(5)
				require.Equal(t, one, many, "%v: results depend on the number of threads", dt)
				if o.ref != nil && dt == tensor.F64 {
					requireClose(t, o.ref(), many, o.tol, o.tol, "F64 vs reference")
				}
			}
		})
	}
}

// Sums large enough to be split across goroutines, by columns (a bias gradient) and by
// outer rows, equal float64 sums written out by hand, rounded once.
func TestSumLarge(t *testing.T) {
	dev := tensor.NewCPU()
	for _, tc := range []struct {
		shape []int
		dim   int
	}{{[]int{3000, 100}, 0}, {[]int{8, 3000, 10}, 1}, {[]int{5, 7, 4000}, 2}} {
		outer, n, inner := 1, tc.shape[tc.dim], 1
		for d, s := range tc.shape {
			if d < tc.dim {
				outer *= s
			} else if d > tc.dim {
				inner *= s
			}
		}
		xs := make([]float32, outer*n*inner)
		for i := range xs {
			xs[i] = float32((i*7919)%1000)/997 - 0.5
		}
		got := tensor.ToSlice[float32](tensor.Sum(tensor.FromSlice(dev, xs, tc.shape...), tc.dim))
		for o := range outer {
			for i := range inner {
				s := 0.0
				for k := range n {
					s += float64(xs[(o*n+k)*inner+i])
				}
				if want := float32(s); got[o*inner+i] != want {
					t.Fatalf("%v over dim %d: element (%d, %d) = %v, want %v", tc.shape, tc.dim, o, i, got[o*inner+i], want)
				}
			}
		}
	}
}
