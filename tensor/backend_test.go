package tensor_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"megago/internal/fakedev"
	"megago/internal/testutil"
	"megago/tensor"
)

// Tests of the Backend interface: every registered backend (at least "cpu" and the
// handle-only "fake") must give bit-identical results, keep kernels on the device, and
// draw the same random values for the same key and region.

// hostData returns n deterministic pseudo-random values in [-1, 1), the same on every
// call with the same seed.
func hostData(seed uint64, n int) []float32 {
	r := rand.New(rand.NewPCG(seed, 0x6d656761676f))
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(2*r.Float64() - 1)
	}
	return v
}

// bits returns t's elements as float32 bit patterns (BF16 and F16 widen exactly).
func bits(t *tensor.Tensor) []uint32 {
	v := tensor.ToSlice[float32](t)
	out := make([]uint32, len(v))
	for i, x := range v {
		out[i] = math.Float32bits(x)
	}
	return out
}

// firstDiff returns the first index where a and b differ, or -1.
func firstDiff(a, b []uint32) int {
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

// compareBackends checks that every backend's results equal the CPU backend's, bit for
// bit, and that every backend produced every result.
func compareBackends(t *testing.T, results map[string]map[string][]uint32) {
	t.Helper()
	ref, ok := results["cpu"]
	if !ok {
		t.Fatal("no results from the cpu backend")
	}
	if _, ok := results[fakedev.Name]; !ok {
		t.Fatal("no results from the fake backend")
	}
	for name, res := range results {
		if len(res) != len(ref) {
			t.Errorf("%s: %d results, cpu has %d", name, len(res), len(ref))
		}
		for op, want := range ref {
			if i := firstDiff(res[op], want); i >= 0 {
				t.Errorf("%s: %s differs from cpu at element %d", name, op, i)
			}
		}
	}
}

// opsChain runs a batch of ops and their backward on inputs created from host data and
// returns the named results, still on the device.
func opsChain(dev *tensor.Device, in map[string]*tensor.Tensor) map[string]*tensor.Tensor {
	a, b, w := in["a"], in["b"], in["w"] // [4, 6], [6, 5], [7, 6]
	q, k := in["q"], in["k"]             // [2, 3, 4], [2, 5, 4]
	ids, tgt := in["ids"], in["tgt"]     // I32 [2, 3], I64 [4]
	gidx := in["gidx"]                   // I64 [4, 2]
	lnw, lnb := in["lnw"], in["lnb"]     // [6]

	out := map[string]*tensor.Tensor{}
	out["matmul"] = tensor.MatMul(a, b)                                 // [4, 5]
	out["matmulT"] = tensor.MatMulT(q, k, false, true)                  // [2, 3, 5]
	out["softmax"] = tensor.Softmax(out["matmulT"].Reshape(2, 1, 3, 5), // [2, 1, 3, 5]
		tensor.SoftmaxOptions{Scale: 0.5, Causal: true})
	out["logsoftmax"] = tensor.LogSoftmax(out["matmul"], tensor.SoftmaxOptions{})
	out["layernorm"] = tensor.LayerNorm(a, lnw, lnb, 1e-5)   // [4, 6]
	out["gelu"] = tensor.GeLU(out["layernorm"])              // [4, 6]
	out["embedding"] = tensor.Embedding(w, ids)              // [2, 3, 6]
	out["gather"] = tensor.Gather(a, 1, gidx)                // [4, 2]
	out["narrow_inner"] = a.Narrow(1, 2, 3)                  // copy, [4, 3]
	out["narrow_outer"] = a.Narrow(0, 1, 2)                  // view, [2, 6]
	out["concat"] = tensor.Concat(1, a, out["narrow_inner"]) // [4, 9]
	out["permute"] = out["embedding"].Permute(2, 0, 1)       // [6, 2, 3]
	out["bf16"] = out["matmul"].Cast(tensor.BF16)            // [4, 5]
	out["f16"] = out["matmul"].Cast(tensor.F16)              // [4, 5]
	out["bf16_matmul"] = tensor.MatMul(a.Cast(tensor.BF16), b.Cast(tensor.BF16))
	out["f64_sum"] = tensor.Sum(out["concat"].Cast(tensor.F64), 0) // [9]
	ce := tensor.CrossEntropy(out["matmul"], tgt, tensor.CrossEntropyOptions{LabelSmoothing: 0.1})
	out["cross_entropy"] = ce

	loss := tensor.Add(ce, tensor.Mean(tensor.Mul(out["gelu"], out["gelu"])))
	loss = tensor.Add(loss, tensor.Mean(out["softmax"]))
	loss = tensor.Add(loss, tensor.Sum(tensor.Mul(out["permute"], out["permute"])))
	loss = tensor.Add(loss, tensor.Sum(out["gather"]))
	loss = tensor.Add(loss, tensor.Sum(out["bf16_matmul"].Cast(tensor.F32)))
	loss = tensor.Add(loss, tensor.Sum(out["f64_sum"]).Cast(tensor.F32))
	loss.Backward()
	out["loss"] = loss
	for _, name := range []string{"a", "b", "w", "q", "k", "lnw", "lnb"} {
		out["grad_"+name] = in[name].Grad()
	}
	return out
}

// uploads creates opsChain's inputs from host data: one host→device copy each.
func uploads(dev *tensor.Device) map[string]*tensor.Tensor {
	f := func(seed uint64, shape ...int) *tensor.Tensor {
		n := tensor.Shape(shape).Numel()
		return tensor.FromSlice(dev, hostData(seed, n), shape...).SetRequiresGrad(true)
	}
	return map[string]*tensor.Tensor{
		"a": f(1, 4, 6), "b": f(2, 6, 5), "w": f(3, 7, 6),
		"q": f(4, 2, 3, 4), "k": f(5, 2, 5, 4),
		"lnw": f(6, 6), "lnb": f(7, 6),
		"ids":  tensor.FromSlice(dev, []int32{0, 6, 3, 3, 1, 5}, 2, 3),
		"tgt":  tensor.FromSlice(dev, []int64{4, 0, 2, 2}, 4),
		"gidx": tensor.FromSlice(dev, []int64{5, 0, 1, 1, 2, 3, 4, 0}, 4, 2),
	}
}

func TestBackendsAgreeBitwise(t *testing.T) {
	results := map[string]map[string][]uint32{}
	testutil.ForEachBackend(t, func(t *testing.T, dev *tensor.Device) {
		s := dev.NewScope()
		defer s.Close()
		in := uploads(dev)
		out := opsChain(dev, in)
		res := map[string][]uint32{}
		for name, o := range out {
			if o == nil {
				t.Fatalf("%s is nil", name)
			}
			res[name] = bits(o)
		}
		// The narrow types' own bit patterns, not just their float32 values.
		for _, x := range tensor.ToSlice[tensor.BFloat16](out["bf16"]) {
			res["bf16_raw"] = append(res["bf16_raw"], uint32(x))
		}
		for _, x := range tensor.ToSlice[tensor.Float16](out["f16"]) {
			res["f16_raw"] = append(res["f16_raw"], uint32(x))
		}
		results[dev.String()] = res
	})
	compareBackends(t, results)
}

// TestFakeBackendCountsCopies shows that ops run on the device: between uploading the
// inputs and downloading the results, a chain of forward and backward ops makes no copy
// between host and device.
func TestFakeBackendCountsCopies(t *testing.T) {
	dev, err := tensor.Open(fakedev.Name)
	if err != nil {
		t.Fatal(err)
	}
	fake := fakedev.Of(dev)
	s := dev.NewScope()
	defer s.Close()

	in := uploads(dev)
	st := fake.Stats()
	var inBytes int64
	for _, x := range in {
		inBytes += int64(x.Numel() * x.DType().Size())
	}
	if st.HostToDevice != int64(len(in)) || st.HostToDeviceBytes != inBytes || st.DeviceToHost != 0 {
		t.Fatalf("after creating %d tensors from slices (%d bytes): %+v", len(in), inBytes, st)
	}

	fake.ResetStats()
	out := opsChain(dev, in)
	if st := fake.Stats(); st.HostToDevice != 0 || st.DeviceToHost != 0 {
		t.Errorf("forward and backward of %d ops copied through the host: %+v", len(out), st)
	}

	fake.ResetStats()
	mm := tensor.ToSlice[float32](out["matmul"])
	_ = tensor.ToSlice[float64](out["bf16"]) // cast on the device, then one copy
	loss := out["loss"].Item()               // cast to F64 on the device, then one copy
	st = fake.Stats()
	wantBytes := int64(4*len(mm) + 8*out["bf16"].Numel() + 8)
	if st.DeviceToHost != 3 || st.DeviceToHostBytes != wantBytes || st.HostToDevice != 0 {
		t.Errorf("three downloads (%d bytes): %+v", wantBytes, st)
	}
	if math.IsNaN(loss) {
		t.Errorf("loss is NaN")
	}
}

// TestFakeBackendHandles checks the fake device's guarantees: fresh storage is garbage
// (not zeros), Free invalidates the handle, spans are bounds-checked.
func TestFakeBackendHandles(t *testing.T) {
	fake := fakedev.New()
	buf := fake.Alloc(tensor.F32, 4)
	span := tensor.Span{Buf: buf, DType: tensor.F32, Shape: tensor.Shape{4}}
	for i, b := range fake.PeekBytes(span) {
		if b != 0xFF {
			t.Fatalf("byte %d of new storage is %#x, want 0xff", i, b)
		}
	}
	expectPanic(t, "outside a buffer", func() {
		fake.Fill(tensor.Span{Buf: buf, Off: 2, DType: tensor.F32, Shape: tensor.Shape{4}}, 0)
	})
	expectPanic(t, "float64 span of a float32 buffer", func() {
		fake.Fill(tensor.Span{Buf: buf, DType: tensor.F64, Shape: tensor.Shape{2}}, 0)
	})
	fake.Free(buf)
	if st := fake.Stats(); st.Live != 0 || st.Frees != 1 {
		t.Errorf("after Free: %+v", st)
	}
	expectPanic(t, "use of freed buffer", func() { fake.Fill(span, 1) })
	expectPanic(t, "not a fake-device handle", func() {
		fake.Fill(tensor.Span{Buf: "elsewhere", DType: tensor.F32, Shape: tensor.Shape{1}}, 1)
	})
}

// expectPanic runs fn and checks that it panics with a message containing want.
func expectPanic(t *testing.T, want string, fn func()) {
	t.Helper()
	msg, panicked := panicMessage(fn)
	if !panicked {
		t.Errorf("did not panic; want a panic containing %q", want)
	} else if !strings.Contains(msg, want) {
		t.Errorf("panic %q does not contain %q", msg, want)
	}
}

// TestReleasedStorageIsPoisoned: storage that goes back to the pool is overwritten, so a
// stale read would show NaNs; reallocating the same size reuses it, poison included.
func TestReleasedStorageIsPoisoned(t *testing.T) {
	testutil.ForEachBackend(t, func(t *testing.T, dev *tensor.Device) {
		const n = 24
		s := dev.NewScope()
		x := tensor.FromSlice(dev, hostData(9, n), n)
		span := x.Span()
		s.Close()

		if fake, ok := dev.Backend().(*fakedev.Backend); ok {
			for i, b := range fake.PeekBytes(span) {
				if b != 0xFF {
					t.Fatalf("byte %d of released storage is %#x, want 0xff", i, b)
				}
			}
			if st := fake.Stats(); st.Poisons != 1 {
				t.Errorf("poisoned %d buffers, want 1", st.Poisons)
			}
		}

		fresh := dev.Stats().FreshAllocs
		s = dev.NewScope()
		defer s.Close()
		y := tensor.Empty(dev, tensor.F32, n) // the pool's buffer
		if got := dev.Stats().FreshAllocs; got != fresh {
			t.Errorf("Empty of a pooled size allocated fresh storage (%d → %d allocations)", fresh, got)
		}
		for i, v := range tensor.ToSlice[float32](y) {
			if !math.IsNaN(float64(v)) {
				t.Fatalf("element %d of recycled storage is %v, want NaN (poison)", i, v)
			}
		}
	})
}

// TestFreedHandlePanics: after the pool gives its storage back to the fake backend, the
// handle is dead and a stale span that still names it panics instead of reading memory.
func TestFreedHandlePanics(t *testing.T) {
	dev, err := tensor.Open(fakedev.Name)
	if err != nil {
		t.Fatal(err)
	}
	s := dev.NewScope()
	span := tensor.Zeros(dev, tensor.F32, 8).Span()
	s.Close()
	dev.EmptyCache()
	if st := fakedev.Of(dev).Stats(); st.Live != 0 {
		t.Errorf("%d handles live after EmptyCache", st.Live)
	}
	expectPanic(t, "use of freed buffer", func() { fakedev.Of(dev).PeekBytes(span) })
	expectPanic(t, "use of freed buffer", func() { dev.Backend().Fill(span, 0) })
}

// referenceDropout returns the dropout mask value of element i of a full tensor, computed
// from Philox (checked against known answers in rng_test.go) and the bit recipe documented
// on tensor.RNG: words 2(i mod 2) and 2(i mod 2)+1 of block i/2 form a 53-bit fraction u;
// the element is dropped when u < p.
func referenceDropout(i int, key [2]uint32, p float64) float32 {
	blk := uint64(i / 2)
	w := tensor.Philox4x32([4]uint32{uint32(blk), uint32(blk >> 32), 0, 0}, key)
	h := 2 * (i % 2)
	u := float64(uint64(w[h])<<21|uint64(w[h+1])>>11) / (1 << 53)
	if u < p {
		return 0
	}
	return float32(1 / (1 - p))
}

func TestDropoutRegionMatchesWholeTensor(t *testing.T) {
	const (
		rows, cols = 16, 32
		p          = 0.25
	)
	rng := tensor.NewRNG(2024).Named("dropout").Fold(3) // layer 3
	full := tensor.Shape{rows, cols}
	results := map[string]map[string][]uint32{}
	testutil.ForEachBackend(t, func(t *testing.T, dev *tensor.Device) {
		s := dev.NewScope()
		defer s.Close()
		whole := tensor.Dropout(tensor.Ones(dev, tensor.F32, rows, cols), p, rng) // the mask
		// Rows [8, 16): the second half, as a TP/SP shard would hold it.
		lower := tensor.DropoutRegion(tensor.Ones(dev, tensor.F32, 8, cols), p, rng, full, []int{8, 0})
		// A block inside: rows [8, 16), columns [8, 24).
		block := tensor.DropoutRegion(tensor.Ones(dev, tensor.F32, 8, 16), p, rng, full, []int{8, 8})

		w := tensor.ToSlice[float32](whole)
		dropped := 0
		for i, v := range w {
			if want := referenceDropout(i, rng.Key(), p); math.Float32bits(v) != math.Float32bits(want) {
				t.Fatalf("mask element %d = %v, reference %v", i, v, want)
			}
			if v == 0 {
				dropped++
			}
		}
		// 512 Bernoulli(0.25) draws: mean 128, sd ≈ 9.8; ±5 sd.
		if dropped < 79 || dropped > 177 {
			t.Errorf("dropped %d of %d at p=%v", dropped, len(w), p)
		}
		if i := firstDiff(bits(lower), bits(whole.Narrow(0, 8, 8))); i >= 0 {
			t.Errorf("rows [8,16) drawn alone differ from the whole mask at element %d", i)
		}
		if i := firstDiff(bits(block), bits(whole.Narrow(0, 8, 8).Narrow(1, 8, 16))); i >= 0 {
			t.Errorf("block [8:16, 8:24) drawn alone differs from the whole mask at element %d", i)
		}
		results[dev.String()] = map[string][]uint32{"whole": bits(whole), "lower": bits(lower), "block": bits(block)}
	})
	compareBackends(t, results)
}

func TestNormalInitRegionMatchesWholeTensor(t *testing.T) {
	rng := tensor.NewRNG(7).Named("init").Fold(0)
	full := []int{16, 32}
	results := map[string]map[string][]uint32{}
	testutil.ForEachBackend(t, func(t *testing.T, dev *tensor.Device) {
		s := dev.NewScope()
		defer s.Close()
		const std = 0.02
		whole := rng.Normal(dev, tensor.F32, tensor.Whole(full...), 0, std)
		// A column-parallel shard: columns [16, 32) of every row.
		shard := rng.Normal(dev, tensor.F32, tensor.Region{Full: full, Start: []int{0, 16}, Size: tensor.Shape{16, 16}}, 0, std)
		if i := firstDiff(bits(shard), bits(whole.Narrow(1, 16, 16))); i >= 0 {
			t.Errorf("columns [16,32) drawn alone differ from the whole tensor at element %d", i)
		}
		v := tensor.ToSlice[float64](whole)
		mean, sq := 0.0, 0.0
		for _, x := range v {
			mean += x
			sq += x * x
		}
		mean /= float64(len(v))
		sd := math.Sqrt(sq/float64(len(v)) - mean*mean)
		// 512 draws: the sample mean's sd is std/√512 ≈ 0.0009; the sample sd is within ~10%.
		if math.Abs(mean) > 0.005 || math.Abs(sd-std) > 0.1*std*2 {
			t.Errorf("mean %v, sd %v; want about 0 and %v", mean, sd, std)
		}
		bf := rng.Normal(dev, tensor.BF16, tensor.Whole(full...), 0, std)
		results[dev.String()] = map[string][]uint32{"whole": bits(whole), "shard": bits(shard), "bf16": bits(bf)}
	})
	compareBackends(t, results)
}

// TestBackendsRegistered: the CPU backend registers itself, and the test helper brings in
// the fake one.
func TestBackendsRegistered(t *testing.T) {
	names := tensor.Backends()
	for _, want := range []string{"cpu", fakedev.Name} {
		if !slices.Contains(names, want) {
			t.Errorf("Backends() = %v, missing %q", names, want)
		}
	}
	if _, err := tensor.Open("no-such-backend"); err == nil || !strings.Contains(err.Error(), "no-such-backend") {
		t.Errorf("Open of an unknown backend: err = %v", err)
	}
}
