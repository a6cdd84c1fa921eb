package cuda

import (
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"sort"
	"testing"

	"megago/tensor"
)

// The backend-agnostic op suite on the CUDA backend: every op (and its backward through
// autograd) runs on the CPU backend and on the GPU from the same host data, and the
// results must agree within the rounding of the dtype. Tests skip without a GPU.

// openTestBackend opens the GPU backend, or skips the test saying what it needs.
func openTestBackend(t *testing.T) *Backend {
	t.Helper()
	if b := openEmulatedBackend(t); b != nil {
		return b
	}
	b, err := Open(Config{})
	if errors.Is(err, ErrNoDevice) && os.Getenv("MEGAGO_REQUIRE_GPU") != "1" {
		t.Skipf("needs a CUDA GPU with libcuda, cuBLASLt and NVRTC: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Error(err)
		}
	})
	return b
}

// tolerance returns the allowed |got − want| for a reference value of a dtype: float32
// kernels differ from the CPU's in summation order and float-vs-double intermediates,
// bf16/f16 results by an ulp of their 8/11-bit mantissa after such differences.
func tolerance(dt tensor.DType, want float64) float64 {
	switch dt {
	case tensor.F64:
		return 1e-10 * (1 + math.Abs(want))
	case tensor.BF16:
		return 2e-2 * (1 + math.Abs(want))
	case tensor.F16:
		return 4e-3 * (1 + math.Abs(want))
	}
	return 2e-4*math.Abs(want) + 2e-5
}

// values returns a tensor's elements as float64 on the host.
func values(x *tensor.Tensor) []float64 {
	if x.DType() == tensor.I32 || x.DType() == tensor.I64 {
		is := tensor.ToSlice[int64](x.Cast(tensor.I64))
		out := make([]float64, len(is))
		for i, v := range is {
			out[i] = float64(v)
		}
		return out
	}
	return tensor.ToSlice[float64](x.Cast(tensor.F64))
}

// compareResults checks every named GPU result against the CPU's: exactly for names in
// exact, within tolerance otherwise.
func compareResults(t *testing.T, cpu, gpu map[string]*tensor.Tensor, exact map[string]bool) {
	t.Helper()
	names := make([]string, 0, len(cpu))
	for n := range cpu {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		c, g := cpu[n], gpu[n]
		if g == nil {
			t.Errorf("%s: no GPU result", n)
			continue
		}
		if !c.Shape().Equal(g.Shape()) || c.DType() != g.DType() {
			t.Errorf("%s: GPU %v %v, CPU %v %v", n, g.DType(), g.Shape(), c.DType(), c.Shape())
			continue
		}
		cv, gv := values(c), values(g)
		bad := 0
		for i := range cv {
			same := cv[i] == gv[i] || (math.IsNaN(cv[i]) && math.IsNaN(gv[i]))
			if !same && (exact[n] || !(math.Abs(gv[i]-cv[i]) <= tolerance(c.DType(), cv[i]))) {
				if bad < 3 {
					t.Errorf("%s %v: element %d = %v on the GPU, %v on the CPU", n, c.Shape(), i, gv[i], cv[i])
				}
				bad++
			}
		}
		if bad > 3 {
			t.Errorf("%s: %d elements differ in all", n, bad)
		}
	}
}

// hostInputs is deterministic host data for the suite's inputs.
type hostInputs struct{ r *rand.Rand }

func (h hostInputs) floats(n int, lo, hi float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(lo + (hi-lo)*h.r.Float64())
	}
	return v
}

func (h hostInputs) ints(n, limit int) []int64 {
	v := make([]int64, n)
	for i := range v {
		v[i] = int64(h.r.IntN(limit))
	}
	return v
}

// opCase builds inputs on dev from a seeded generator (the same for both devices), runs
// ops and their backward, and returns the named results.
type opCase struct {
	name  string
	exact []string // results that must be bit-identical
	run   func(dev *tensor.Device, h hostInputs) map[string]*tensor.Tensor
}

// leaf uploads values as a leaf of dtype dt that requires grad.
func leaf(dev *tensor.Device, v []float32, dt tensor.DType, shape ...int) *tensor.Tensor {
	return tensor.FromSlice(dev, v, shape...).Cast(dt).Detach().SetRequiresGrad(true)
}

// runOpCases runs every case on the CPU and on b and compares.
func runOpCases(t *testing.T, b *Backend, cases []opCase) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cpu := c.run(tensor.NewCPU(), hostInputs{rand.New(rand.NewPCG(7, uint64(len(c.name))))})
			gpuDev := tensor.NewDevice(b)
			gpu := c.run(gpuDev, hostInputs{rand.New(rand.NewPCG(7, uint64(len(c.name))))})
			exact := map[string]bool{}
			for _, e := range c.exact {
				exact[e] = true
			}
			compareResults(t, cpu, gpu, exact)
			gpuDev.EmptyCache()
		})
	}
}

func TestGPUOpSuite(t *testing.T) {
	b := openTestBackend(t)
	runOpCases(t, b, elementwiseCases())
	runOpCases(t, b, layoutCases())
	runOpCases(t, b, nnCases())
}

// elementwiseCases covers every unary op and its backward in three dtypes.
func elementwiseCases() []opCase {
	unary := []struct {
		name string
		f    func(*tensor.Tensor) *tensor.Tensor
	}{
		{"neg", tensor.Neg}, {"exp", tensor.Exp}, {"log", tensor.Log}, {"sqrt", tensor.Sqrt}, {"tanh", tensor.Tanh},
		{"sigmoid", tensor.Sigmoid}, {"gelu", tensor.GeLU}, {"gelu_erf", tensor.GeLUErf}, {"silu", tensor.SiLU},
		{"relu", tensor.ReLU}, {"add_scalar", func(x *tensor.Tensor) *tensor.Tensor { return tensor.AddScalar(x, 0.75) }},
		{"scale", func(x *tensor.Tensor) *tensor.Tensor { return tensor.Scale(x, -1.5) }},
		{"pow", func(x *tensor.Tensor) *tensor.Tensor { return tensor.Pow(x, 2.5) }},
	}
	var cases []opCase
	for _, dt := range []tensor.DType{tensor.F32, tensor.F64, tensor.BF16} {
		cases = append(cases, opCase{name: "unary/" + dt.String(), run: func(dev *tensor.Device, h hostInputs) map[string]*tensor.Tensor {
			out := map[string]*tensor.Tensor{}
			for _, u := range unary {
				x := leaf(dev, h.floats(300, 0.05, 3), dt, 3, 100) // positive: log, sqrt, pow
				y := u.f(x)
				tensor.Sum(tensor.Mul(y, y).Cast(tensor.F32)).Backward()
				out[u.name], out[u.name+"/grad"] = y, x.Grad()
			}
			return out
		}})
	}
	return cases
}

// layoutCases covers broadcasting, reductions, gathers, copies, casts and random draws.
func layoutCases() []opCase {
	var cases []opCase
	cases = append(cases, opCase{name: "binary_where", run: func(dev *tensor.Device, h hostInputs) map[string]*tensor.Tensor {
		a := leaf(dev, h.floats(4*1*6, -2, 2), tensor.F32, 4, 1, 6)
		b := leaf(dev, h.floats(3*6, 0.5, 2), tensor.F32, 3, 6)
		c := leaf(dev, h.floats(6, -1, 1), tensor.F32, 6)
		cond := tensor.FromSlice(dev, h.ints(3, 2), 3, 1)
		out := map[string]*tensor.Tensor{
			"add": tensor.Add(a, b), "sub": tensor.Sub(b, a), "mul": tensor.Mul(a, c), "div": tensor.Div(a, b),
			"where": tensor.Where(cond, b, c),
		}
		loss := tensor.Sum(tensor.Add(tensor.Add(out["add"], out["sub"]), tensor.Mul(out["div"], out["mul"])))
		loss = tensor.Add(loss, tensor.Sum(out["where"]))
		loss.Backward()
		out["grad_a"], out["grad_b"], out["grad_c"] = a.Grad(), b.Grad(), c.Grad()
		return out
	}})
	cases = append(cases, opCase{name: "reduce_max_gather", exact: []string{"argmax"}, run: func(dev *tensor.Device, h hostInputs) map[string]*tensor.Tensor {
		x := leaf(dev, h.floats(2*5*7, -3, 3), tensor.F32, 2, 5, 7)
		idx := tensor.FromSlice(dev, h.ints(2*3*7, 5), 2, 3, 7)
		out := map[string]*tensor.Tensor{
			"sum0": tensor.Sum(x, 0), "sum1": tensor.Sum(x, 1), "mean2": tensor.Mean(x, 2), "sum_all": tensor.Sum(x),
			"mean_keep": tensor.MeanKeepDim(x, 1), "gather": tensor.Gather(x, 1, idx),
		}
		out["max"], out["argmax"] = tensor.Max(x, 1)
		loss := tensor.Add(tensor.Sum(tensor.Mul(out["gather"], out["gather"])), tensor.Sum(out["max"]))
		loss = tensor.Add(loss, tensor.Add(tensor.Sum(tensor.Mul(out["sum1"], out["sum1"])), tensor.Sum(out["mean2"])))
		loss = tensor.Add(loss, tensor.Sum(tensor.Mul(out["sum0"], out["sum0"])))
		loss = tensor.Add(loss, tensor.Sum(out["mean_keep"]))
		loss.Backward()
		out["grad"] = x.Grad()
		return out
	}})
	cases = append(cases, opCase{name: "layout_casts", exact: []string{"permute", "narrow", "concat", "expand", "bf16", "f16",
		"i32", "f64_to_bf16", "f64_to_f16", "arange_f16", "fill_bf16", "fill_i64"},
		run: func(dev *tensor.Device, h hostInputs) map[string]*tensor.Tensor {
			x := tensor.FromSlice(dev, h.floats(2*3*4*5, -100, 100), 2, 3, 4, 5)
			x64 := tensor.FromSlice(dev, []float64{1 + 1.0/512 + 1e-12, -65519.99, 1e-8, 3.999999999, 1.0000001}, 5)
			return map[string]*tensor.Tensor{
				"permute": x.Permute(3, 1, 0, 2), "narrow": x.Narrow(2, 1, 2), "concat": tensor.Concat(3, x, x.Narrow(3, 1, 3)),
				"expand": x.Narrow(1, 0, 1).Expand(2, 6, 4, 5), "bf16": x.Cast(tensor.BF16), "f16": x.Cast(tensor.F16),
				"i32": x.Cast(tensor.I32), "f64_to_bf16": x64.Cast(tensor.BF16), "f64_to_f16": x64.Cast(tensor.F16),
				"arange_f16": tensor.Arange(dev, tensor.F16, -3, 0.37, 40), "fill_bf16": tensor.Full(dev, tensor.BF16, math.Pi, 7),
				"fill_i64": tensor.Full(dev, tensor.I64, -123456789012, 3),
			}
		}})
	cases = append(cases, opCase{name: "random", exact: []string{"uniform", "bernoulli", "dropout_mask"},
		run: func(dev *tensor.Device, h hostInputs) map[string]*tensor.Tensor {
			rng := tensor.NewRNG(42).Named("suite")
			region := tensor.Region{Full: tensor.Shape{6, 10, 8}, Start: []int{2, 3, 4}, Size: tensor.Shape{3, 5, 4}}
			x := tensor.Ones(dev, tensor.F32, 6, 10, 8)
			return map[string]*tensor.Tensor{
				"uniform":      rng.Uniform(dev, tensor.F64, region, -1, 3),
				"normal":       rng.Normal(dev, tensor.F32, region, 0.5, 2),
				"bernoulli":    rng.Bernoulli(dev, tensor.F32, region, 0.3),
				"dropout_mask": tensor.Dropout(x, 0.25, rng),
			}
		}})
	return cases
}

func nnCases() []opCase {
	var cases []opCase
	for _, dt := range []tensor.DType{tensor.F32, tensor.BF16, tensor.F64} {
		cases = append(cases, opCase{name: "matmul/" + dt.String(), run: func(dev *tensor.Device, h hostInputs) map[string]*tensor.Tensor {
			a := leaf(dev, h.floats(5*7, -1, 1), dt, 5, 7)
			b := leaf(dev, h.floats(7*3, -1, 1), dt, 7, 3)
			q := leaf(dev, h.floats(2*4*6, -1, 1), dt, 2, 4, 6)
			k := leaf(dev, h.floats(2*5*6, -1, 1), dt, 2, 5, 6)
			w := leaf(dev, h.floats(6*3, -1, 1), dt, 6, 3)
			out := map[string]*tensor.Tensor{
				"ab": tensor.MatMul(a, b), "qkT": tensor.MatMulT(q, k, false, true),
				"aTa": tensor.MatMulT(a, a, true, false), "qw": tensor.MatMul(q, w),
			}
			loss := tensor.Add(tensor.Sum(out["ab"]), tensor.Sum(tensor.Mul(out["qkT"], out["qkT"])))
			loss = tensor.Add(loss, tensor.Add(tensor.Sum(out["aTa"]), tensor.Sum(out["qw"])))
			tensor.Sum(loss.Cast(tensor.F32)).Backward()
			out["grad_a"], out["grad_b"], out["grad_q"], out["grad_k"], out["grad_w"] = a.Grad(), b.Grad(), q.Grad(), k.Grad(), w.Grad()
			return out
		}})
	}
	cases = append(cases, opCase{name: "softmax_norms", run: func(dev *tensor.Device, h hostInputs) map[string]*tensor.Tensor {
		s := leaf(dev, h.floats(2*2*3*5, -4, 4), tensor.F32, 2, 2, 3, 5)
		mask := tensor.FromSlice(dev, h.ints(3*5, 2), 3, 5).Cast(tensor.F32)
		x := leaf(dev, h.floats(6*40, -2, 2), tensor.F32, 6, 40)
		w, bias := leaf(dev, h.floats(40, 0.5, 1.5), tensor.F32, 40), leaf(dev, h.floats(40, -1, 1), tensor.F32, 40)
		out := map[string]*tensor.Tensor{
			"softmax_causal": tensor.Softmax(s, tensor.SoftmaxOptions{Scale: 0.7, Causal: true}),
			"softmax_mask":   tensor.Softmax(s, tensor.SoftmaxOptions{Scale: 1, Mask: mask}),
			"log_softmax":    tensor.LogSoftmax(s, tensor.SoftmaxOptions{Scale: 1.3}),
			"layernorm":      tensor.LayerNorm(x, w, bias, 1e-5),
			"layernorm_bare": tensor.LayerNorm(x, nil, nil, 1e-5),
			"rmsnorm":        tensor.RMSNorm(x, w, 1e-6),
		}
		tgt := leafless(dev, h.floats(6*40, -1, 1), 6, 40)
		loss := tensor.Add(tensor.Sum(tensor.Mul(out["layernorm"], tgt)), tensor.Sum(tensor.Mul(out["rmsnorm"], tgt)))
		loss = tensor.Add(loss, tensor.Sum(tensor.Mul(out["layernorm_bare"], tgt)))
		sw := leafless(dev, h.floats(2*2*3*5, -1, 1), 2, 2, 3, 5)
		loss = tensor.Add(loss, tensor.Sum(tensor.Mul(tensor.Add(out["softmax_causal"], out["softmax_mask"]), sw)))
		loss = tensor.Add(loss, tensor.Sum(tensor.Mul(out["log_softmax"], sw)))
		loss.Backward()
		out["grad_s"], out["grad_x"], out["grad_w"], out["grad_b"] = s.Grad(), x.Grad(), w.Grad(), bias.Grad()
		return out
	}})
	cases = append(cases, opCase{name: "embedding_cross_entropy", run: func(dev *tensor.Device, h hostInputs) map[string]*tensor.Tensor {
		wte := leaf(dev, h.floats(11*8, -1, 1), tensor.F32, 11, 8)
		ids := tensor.FromSlice(dev, h.ints(4*5, 11), 4, 5) // repeats: atomic accumulation
		logits := leaf(dev, h.floats(6*11, -3, 3), tensor.F32, 6, 11)
		tg := h.ints(6, 11)
		tg[2] = -100
		targets := tensor.FromSlice(dev, tg, 6)
		emb := tensor.Embedding(wte, ids)
		ce := tensor.CrossEntropy(logits, targets, tensor.CrossEntropyOptions{LabelSmoothing: 0.1, Ignore: true, IgnoreIndex: -100})
		cePerRow := tensor.CrossEntropy(logits, targets, tensor.CrossEntropyOptions{Ignore: true, IgnoreIndex: -100, Reduction: tensor.ReduceNone})
		tensor.Add(tensor.Add(ce, tensor.Sum(tensor.Mul(emb, emb))), tensor.Sum(cePerRow)).Backward()
		return map[string]*tensor.Tensor{"embedding": emb, "ce": ce, "ce_rows": cePerRow, "grad_wte": wte.Grad(), "grad_logits": logits.Grad()}
	}})
	return cases
}

// leafless uploads values as a constant.
func leafless(dev *tensor.Device, v []float32, shape ...int) *tensor.Tensor {
	return tensor.FromSlice(dev, v, shape...)
}

func TestGPUIndexErrorIsReported(t *testing.T) {
	b := openTestBackend(t)
	dev := tensor.NewDevice(b)
	w := tensor.Ones(dev, tensor.F32, 4, 3)
	ids := tensor.FromSlice(dev, []int64{1, 7, 2}, 3)
	defer func() {
		r := recover()
		e, ok := r.(*IndexError)
		if !ok {
			t.Fatalf("recovered %v, want an *IndexError", r)
		}
		if e.Op != "Embedding" || e.Index != 7 || e.Limit != 4 || e.Pos != 1 {
			t.Errorf("error %v", e)
		}
		// The flag is cleared: the device works on.
		if got := tensor.ToSlice[float32](tensor.Ones(dev, tensor.F32, 2)); got[0] != 1 {
			t.Errorf("after the error: %v", got)
		}
	}()
	tensor.ToSlice[float32](tensor.Embedding(w, ids))
}

func TestGPUOutOfMemory(t *testing.T) {
	b := openTestBackend(t)
	defer func() {
		r := recover()
		e, ok := r.(*OutOfMemoryError)
		if !ok {
			t.Fatalf("recovered %v, want an *OutOfMemoryError", r)
		}
		t.Log(e)
		if e.Requested != 1<<50 || e.Total <= 0 {
			t.Errorf("error fields %+v", e)
		}
	}()
	b.Alloc(tensor.I64, 1<<47) // 1 PiB
}

func TestGPUMemStats(t *testing.T) {
	b := openTestBackend(t)
	dev := tensor.NewDevice(b)
	before := b.MemStats()
	x := tensor.Zeros(dev, tensor.F32, 1000) // 4000 bytes: a 4096-byte block
	if st := b.MemStats(); st.Allocated-before.Allocated != 4096 || st.Peak < st.Allocated {
		t.Errorf("after a 4000-byte tensor: %+v (before %+v)", st, before)
	}
	x.Release()
	dev.EmptyCache()
	b.EmptyCache()
	if st := b.MemStats(); st.Allocated != before.Allocated || st.Reserved > before.Reserved {
		t.Errorf("after release and emptying: %+v (before %+v)", st, before)
	}
}
