package tensor_test

import (
	"testing"

	"megago/tensor"
)

// TestGradHookFiresOnceWhenComplete: a leaf used by several ops hears once per backward
// pass, after its last contribution, with the full gradient in Grad.
func TestGradHookFiresOnceWhenComplete(t *testing.T) {
	dev := tensor.NewCPU()
	w := tensor.FromSlice(dev, []float64{1, 2, 3}, 3).SetRequiresGrad(true)
	u := tensor.FromSlice(dev, []float64{5, 6, 7}, 3).SetRequiresGrad(true)
	var seen [][]float64
	w.SetGradHook(func(x *tensor.Tensor) { seen = append(seen, tensor.ToSlice[float64](x.Grad())) })
	for pass := 1; pass <= 2; pass++ {
		// loss = sum(w·w) + sum(w·u) + sum(u): w reaches three input slots.
		loss := tensor.Add(tensor.Add(tensor.Sum(tensor.Mul(w, w)), tensor.Sum(tensor.Mul(w, u))), tensor.Sum(u))
		loss.Backward()
		if len(seen) != pass {
			t.Fatalf("pass %d: hook called %d times in all, want %d", pass, len(seen), pass)
		}
		// d/dw = 2w + u, accumulated over the passes.
		want := []float64{7 * float64(pass), 10 * float64(pass), 13 * float64(pass)}
		for i := range want {
			if seen[pass-1][i] != want[i] {
				t.Fatalf("pass %d: hook saw grad %v, want %v", pass, seen[pass-1], want)
			}
		}
	}
	w.SetGradHook(nil)
	tensor.Sum(w).Backward()
	if len(seen) != 2 {
		t.Errorf("removed hook still called")
	}
}

// TestGradHookInsideCheckpoint: a parameter used only inside a recomputed segment hears
// once, from the segment's recomputation, with its complete gradient.
func TestGradHookInsideCheckpoint(t *testing.T) {
	dev := tensor.NewCPU()
	w := tensor.FromSlice(dev, []float64{1, -2, 3, 4}, 2, 2).SetRequiresGrad(true)
	x := tensor.FromSlice(dev, []float64{1, 2, 3, 4}, 2, 2)
	calls := 0
	var got []float64
	w.SetGradHook(func(p *tensor.Tensor) { calls++; got = tensor.ToSlice[float64](p.Grad()) })
	y := tensor.Checkpoint(func(in []*tensor.Tensor) []*tensor.Tensor {
		h := tensor.MatMul(in[0], w)
		return []*tensor.Tensor{tensor.MatMul(h, w)}
	}, x)[0]
	tensor.Sum(y).Backward()
	if calls != 1 {
		t.Fatalf("hook called %d times, want 1", calls)
	}
	want := tensor.ToSlice[float64](w.Grad())
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("hook saw %v, final grad %v", got, want)
		}
	}
}

// TestGradHookUnreachedLeaf: a leaf the pass does not reach is not called.
func TestGradHookUnreachedLeaf(t *testing.T) {
	dev := tensor.NewCPU()
	a := tensor.Ones(dev, tensor.F64, 2).SetRequiresGrad(true)
	b := tensor.Ones(dev, tensor.F64, 2).SetRequiresGrad(true)
	called := false
	b.SetGradHook(func(*tensor.Tensor) { called = true })
	tensor.Sum(a).Backward()
	if called {
		t.Error("hook of an unreached leaf was called")
	}
}
