package tensor_test

import (
	"math"
	"testing"

	"megago/internal/testutil"
	"megago/tensor"
)

// Tests of memory scopes and the device's caching pool.

// Sizes of the small training model: B batch, T sequence, C hidden, F MLP hidden, V vocab.
const (
	smallB, smallT, smallC, smallF, smallV = 2, 4, 8, 16, 11
	learningRate                           = 0.1
	trainSteps                             = 5
	steadyFromStep                         = 3 // the first step that must allocate nothing fresh
)

// smallModel is a one-block transformer-like model: embedding, layer norm, causal softmax
// attention (without projections), a GeLU MLP and a cross-entropy loss.
type smallModel struct {
	wte      *tensor.Tensor // [V, C]
	lnw, lnb *tensor.Tensor // [C]
	w1, b1   *tensor.Tensor // [C, F], [F]
	w2, b2   *tensor.Tensor // [F, V], [V]
}

// newSmallModel creates the parameters outside any scope, as a program does.
func newSmallModel(dev *tensor.Device) *smallModel {
	rng := tensor.NewRNG(42).Named("init")
	normal := func(layer uint64, shape ...int) *tensor.Tensor {
		return rng.Fold(layer).Normal(dev, tensor.F32, tensor.Whole(shape...), 0, 0.5).SetRequiresGrad(true)
	}
	return &smallModel{
		wte: normal(0, smallV, smallC),
		lnw: tensor.Ones(dev, tensor.F32, smallC).SetRequiresGrad(true),
		lnb: tensor.Zeros(dev, tensor.F32, smallC).SetRequiresGrad(true),
		w1:  normal(1, smallC, smallF),
		b1:  tensor.Zeros(dev, tensor.F32, smallF).SetRequiresGrad(true),
		w2:  normal(2, smallF, smallV),
		b2:  tensor.Zeros(dev, tensor.F32, smallV).SetRequiresGrad(true),
	}
}

func (m *smallModel) params() []*tensor.Tensor {
	return []*tensor.Tensor{m.wte, m.lnw, m.lnb, m.w1, m.b1, m.w2, m.b2}
}

// loss returns the mean cross entropy of the next-token logits.
func (m *smallModel) loss(ids, targets *tensor.Tensor) *tensor.Tensor {
	x := tensor.Embedding(m.wte, ids)            // [B, T, C]
	h := tensor.LayerNorm(x, m.lnw, m.lnb, 1e-5) // [B, T, C]
	scores := tensor.MatMulT(h, h, false, true)  // [B, T, T]
	att := tensor.Softmax(scores, tensor.SoftmaxOptions{Scale: 1 / math.Sqrt(smallC), Causal: true})
	h = tensor.Add(h, tensor.MatMul(att, h))                   // [B, T, C]
	f := tensor.GeLU(tensor.Add(tensor.MatMul(h, m.w1), m.b1)) // [B, T, F]
	logits := tensor.Add(tensor.MatMul(f, m.w2), m.b2)         // [B, T, V]
	return tensor.CrossEntropy(logits, targets, tensor.CrossEntropyOptions{})
}

// sgdStep updates every parameter in place, p ← p − lr·∇p, and zeroes its gradient.
func sgdStep(dev *tensor.Device, params []*tensor.Tensor, lr float64) {
	dev.NoGrad(func() {
		for _, p := range params {
			p.Axpy(-lr, p.Grad())
			p.ZeroGrad()
		}
	})
}

// smallBatch returns fixed token ids and next-token targets, [B, T] each.
func smallBatch() (ids, targets []int32) {
	for i := range smallB * smallT {
		ids = append(ids, int32((3*i+1)%smallV))
		targets = append(targets, int32((3*i+4)%smallV))
	}
	return ids, targets
}

// stepStats is what one training step did to the pool.
type stepStats struct {
	loss              float32
	fresh, freshAlloc int64 // bytes and allocations obtained from the backend
	inUseBefore       int64
	inUseAfter        int64
}

// trainSmallModel runs identical training steps, each inside its own scope, with step
// computing the loss inside that scope.
func trainSmallModel(dev *tensor.Device, params []*tensor.Tensor, steps int, step func() *tensor.Tensor) []stepStats {
	var out []stepStats
	for range steps {
		before := dev.Stats()
		s := dev.NewScope()
		loss := step()
		loss.Backward()
		l := tensor.ToSlice[float32](loss)[0]
		sgdStep(dev, params, learningRate)
		s.Close()
		after := dev.Stats()
		out = append(out, stepStats{
			loss: l, fresh: after.Fresh - before.Fresh, freshAlloc: after.FreshAllocs - before.FreshAllocs,
			inUseBefore: before.InUse, inUseAfter: after.InUse,
		})
	}
	return out
}

// checkSteadyState asserts the pool properties of a training run: from step 3 on nothing
// is allocated fresh; after step 1 (which creates the gradients, outside scopes) every
// step returns all its storage.
func checkSteadyState(t *testing.T, stats []stepStats, params []*tensor.Tensor) {
	t.Helper()
	var gradBytes int64
	for _, p := range params {
		gradBytes += int64(p.Numel() * p.DType().Size())
	}
	for i, st := range stats {
		step := i + 1
		t.Logf("step %d: loss %.6f, fresh %d bytes in %d allocations", step, st.loss, st.fresh, st.freshAlloc)
		if step >= steadyFromStep && (st.fresh != 0 || st.freshAlloc != 0) {
			t.Errorf("step %d allocated %d fresh bytes (%d allocations), want 0", step, st.fresh, st.freshAlloc)
		}
		want := st.inUseBefore
		if step == 1 {
			want += gradBytes // the parameters' gradients, which outlive the step
		}
		if st.inUseAfter != want {
			t.Errorf("step %d: InUse %d after the scope closed, want %d", step, st.inUseAfter, want)
		}
	}
	if first, last := stats[0].loss, stats[len(stats)-1].loss; !(last < first) {
		t.Errorf("loss went from %v to %v over %d steps of SGD on one batch", first, last, len(stats))
	}
}

func TestTrainingStepAllocatesNothingFromStepThree(t *testing.T) {
	losses := map[string]map[string][]uint32{}
	testutil.ForEachBackend(t, func(t *testing.T, dev *tensor.Device) {
		m := newSmallModel(dev)
		ids, targets := smallBatch()
		stats := trainSmallModel(dev, m.params(), trainSteps, func() *tensor.Tensor {
			return m.loss(tensor.FromSlice(dev, ids, smallB, smallT), tensor.FromSlice(dev, targets, smallB, smallT))
		})
		checkSteadyState(t, stats, m.params())
		var lb []uint32
		for _, st := range stats {
			lb = append(lb, math.Float32bits(st.loss))
		}
		losses[dev.String()] = map[string][]uint32{"losses": lb, "w2": bits(m.w2)}
	})
	compareBackends(t, losses)
}

// TestStageInputGradientIsScoped: a pipeline stage's input requires grad so its gradient
// can be sent upstream. That gradient belongs to the input's scope, so a stage that runs
// every micro-batch in a scope reaches a steady state too.
func TestStageInputGradientIsScoped(t *testing.T) {
	testutil.ForEachBackend(t, func(t *testing.T, dev *tensor.Device) {
		w := tensor.FromSlice(dev, hostData(11, smallC*smallF), smallC, smallF).SetRequiresGrad(true)
		for step := 1; step <= trainSteps; step++ {
			before := dev.Stats()
			s := dev.NewScope()
			x := tensor.FromSlice(dev, hostData(12, smallB*smallC), smallB, smallC).SetRequiresGrad(true) // received
			dy := tensor.Ones(dev, tensor.F32, smallB, smallF)                                            // received
			tensor.GeLU(tensor.MatMul(x, w)).BackwardWithGrad(dy)
			gx := x.Grad() // sent upstream
			if gx == nil || gx.Released() {
				t.Fatalf("step %d: input gradient %v", step, gx)
			}
			s.Close()
			after := dev.Stats()
			if !gx.Released() {
				t.Errorf("step %d: the input's gradient outlived the input's scope", step)
			}
			if fresh := after.Fresh - before.Fresh; step >= steadyFromStep && fresh != 0 {
				t.Errorf("step %d allocated %d fresh bytes, want 0", step, fresh)
			}
			w.ZeroGrad()
			if step > 1 && after.InUse != before.InUse {
				t.Errorf("step %d: InUse %d → %d", step, before.InUse, after.InUse)
			}
		}
	})
}

func TestScopesNest(t *testing.T) {
	testutil.ForEachBackend(t, func(t *testing.T, dev *tensor.Device) {
		base := dev.Stats().InUse
		param := tensor.Ones(dev, tensor.F32, 3) // outside any scope
		outer := dev.NewScope()
		a := tensor.Ones(dev, tensor.F32, 4)
		inner := dev.NewScope()
		b := tensor.Ones(dev, tensor.F32, 5)
		c := tensor.Add(a, a)
		inner.Close()
		if !b.Released() || !c.Released() {
			t.Errorf("inner scope's tensors survived its Close: b %v, c %v", b.Released(), c.Released())
		}
		if a.Released() {
			t.Errorf("outer scope's tensor released by the inner Close")
		}
		if got := tensor.ToSlice[float32](a); got[0] != 1 {
			t.Errorf("a = %v after the inner Close", got)
		}
		outer.Close()
		if !a.Released() {
			t.Errorf("outer scope's tensor survived its Close")
		}
		if param.Released() {
			t.Errorf("a tensor created outside scopes was released")
		}
		if got, want := dev.Stats().InUse, base+3*4; got != want {
			t.Errorf("InUse %d after both scopes closed, want %d (the unscoped tensor)", got, want)
		}
		outer.Close() // closing twice does nothing
	})
}

func TestKeepMovesToParentScope(t *testing.T) {
	testutil.ForEachBackend(t, func(t *testing.T, dev *tensor.Device) {
		outer := dev.NewScope()
		inner := dev.NewScope()
		kept := tensor.Full(dev, tensor.F32, 2, 4).Keep()
		view := kept.Reshape(2, 2)
		dropped := tensor.Full(dev, tensor.F32, 3, 4)
		inner.Close()
		if kept.Released() || view.Released() {
			t.Fatalf("kept tensor (or its view) released by the inner Close")
		}
		if !dropped.Released() {
			t.Errorf("tensor that was not kept survived")
		}
		if got := tensor.ToSlice[float32](view); got[3] != 2 {
			t.Errorf("kept tensor reads %v", got)
		}
		outer.Close()
		if !kept.Released() {
			t.Errorf("kept tensor survived the outer scope's Close")
		}

		// Kept from the outermost scope: it belongs to no scope any more.
		s := dev.NewScope()
		state := tensor.Zeros(dev, tensor.F32, 4).Keep()
		s.Close()
		if state.Released() {
			t.Errorf("tensor kept from the outermost scope was released")
		}
		state.Release()
	})
}

func TestReleaseEarly(t *testing.T) {
	testutil.ForEachBackend(t, func(t *testing.T, dev *tensor.Device) {
		base := dev.Stats().InUse
		s := dev.NewScope()
		x := tensor.Ones(dev, tensor.F32, 8)
		y := tensor.Ones(dev, tensor.F32, 8)
		view := x.Reshape(2, 4)
		if got := dev.Stats().InUse - base; got != 2*8*4 {
			t.Errorf("InUse grew by %d bytes for two tensors of 32 bytes", got)
		}
		view.Release() // releases the storage x and view share
		if !x.Released() {
			t.Errorf("releasing a view did not release its storage")
		}
		if got := dev.Stats().InUse - base; got != 8*4 {
			t.Errorf("InUse is %d bytes above the start after releasing one of two tensors", got)
		}
		x.Release() // twice: nothing
		s.Close()
		if got := dev.Stats().InUse; got != base {
			t.Errorf("InUse %d after Close, want %d (a released tensor counted twice?)", got, base)
		}
		if !y.Released() {
			t.Errorf("scope Close skipped a tensor")
		}
	})
}

func TestUseAfterReleasePanics(t *testing.T) {
	testutil.ForEachBackend(t, func(t *testing.T, dev *tensor.Device) {
		s := dev.NewScope()
		x := tensor.Ones(dev, tensor.F32, 2, 3)
		early := tensor.Ones(dev, tensor.F32, 2, 3)
		early.Release()
		view := x.Reshape(6)
		s.Close()

		uses := map[string]func(){
			"ToSlice":         func() { tensor.ToSlice[float32](x) },
			"Item":            func() { tensor.Sum(x).Item() },
			"Add":             func() { tensor.Add(x, x) },
			"MatMul":          func() { tensor.MatMul(x, x.Reshape(3, 2)) },
			"Reshape":         func() { x.Reshape(3, 2) },
			"view":            func() { tensor.ToSlice[float32](view) },
			"Keep":            func() { x.Keep() },
			"released early":  func() { tensor.Mul(early, early) },
			"Span":            func() { x.Span() },
			"CopyFrom (dst)":  func() { x.CopyFrom(tensor.Ones(dev, tensor.F32, 2, 3)) },
			"CopyFrom (src)":  func() { tensor.Ones(dev, tensor.F32, 2, 3).CopyFrom(x) },
			"To other device": func() { x.To(tensor.NewCPU()) },
		}
		for name, use := range uses {
			t.Run(name, func(t *testing.T) { expectPanic(t, "released", use) })
		}
		if s := x.String(); s != "tensor(released float32 [2 3])" {
			t.Errorf("String of a released tensor: %q", s)
		}
	})
}

func TestScopeCloseOutOfOrderPanics(t *testing.T) {
	testutil.ForEachBackend(t, func(t *testing.T, dev *tensor.Device) {
		outer := dev.NewScope()
		inner := dev.NewScope()
		x := tensor.Ones(dev, tensor.F32, 2)
		expectPanic(t, "inner scope is still open", outer.Close)
		if x.Released() {
			t.Errorf("the failed Close released the inner scope's tensor")
		}
		inner.Close()
		outer.Close()
		if !x.Released() {
			t.Errorf("tensor survived both scopes")
		}
	})
}

func TestViewsShareTheirStoragesFate(t *testing.T) {
	testutil.ForEachBackend(t, func(t *testing.T, dev *tensor.Device) {
		base := dev.Stats().InUse
		s := dev.NewScope()
		x := tensor.Arange(dev, tensor.F32, 0, 1, 12)
		r := x.Reshape(3, 4)
		n := r.Narrow(0, 1, 2) // outermost dim: a view
		u := n.Unsqueeze(0)
		if got := dev.Stats().InUse - base; got != 12*4 {
			t.Errorf("views allocated storage: InUse grew by %d bytes, want %d", got, 12*4)
		}
		if got := tensor.ToSlice[float32](u); got[0] != 4 || len(got) != 8 {
			t.Errorf("view reads %v", got)
		}
		s.Close()
		for name, v := range map[string]*tensor.Tensor{"x": x, "Reshape": r, "Narrow": n, "Unsqueeze": u} {
			if !v.Released() {
				t.Errorf("%s survived its storage's scope", name)
			}
		}
		if got := dev.Stats().InUse; got != base {
			t.Errorf("InUse %d after Close, want %d", got, base)
		}
	})
}

func TestLeafGradSurvivesScope(t *testing.T) {
	testutil.ForEachBackend(t, func(t *testing.T, dev *tensor.Device) {
		w := tensor.FromSlice(dev, []float32{1, 2, 3}, 3).SetRequiresGrad(true)
		for range 2 { // gradients accumulate across scopes
			s := dev.NewScope()
			x := tensor.FromSlice(dev, []float32{4, 5, 6}, 3)
			tensor.Sum(tensor.Mul(w, x)).Backward() // d/dw = x
			s.Close()
		}
		if w.Grad() == nil || w.Grad().Released() {
			t.Fatalf("parameter gradient %v after the scopes closed", w.Grad())
		}
		want := []float32{8, 10, 12}
		for i, g := range tensor.ToSlice[float32](w.Grad()) {
			if g != want[i] {
				t.Errorf("grad[%d] = %v, want %v", i, g, want[i])
			}
		}
	})
}
