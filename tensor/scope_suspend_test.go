package tensor_test

import (
	"testing"

	"megago/tensor"
)

// TestSuspendedScopesOverlap runs three "micro-batches" whose lifetimes overlap as in a
// 1F1B pipeline schedule (forward 0, forward 1, backward 0, forward 2, backward 1,
// backward 2): each micro-batch's tensors, including the temporaries of its backward
// pass and its input's gradient, are released exactly when its scope closes.
func TestSuspendedScopesOverlap(t *testing.T) {
	dev := tensor.NewCPU()
	w := tensor.Ones(dev, tensor.F32, 4, 4).SetRequiresGrad(true)
	step := dev.NewScope()
	defer step.Close()
	type micro struct {
		s      *tensor.Scope
		x, y   *tensor.Tensor
		inGrad *tensor.Tensor
	}
	var mbs []*micro
	forward := func() {
		m := &micro{s: dev.NewScope()}
		m.x = tensor.Full(dev, tensor.F32, float64(len(mbs)+1), 2, 4).SetRequiresGrad(true)
		m.y = tensor.GeLU(tensor.MatMul(m.x, w))
		m.s.Suspend()
		mbs = append(mbs, m)
	}
	backward := func(i int) {
		m := mbs[i]
		m.s.Resume()
		m.y.BackwardWithGrad(tensor.Ones(dev, tensor.F32, 2, 4))
		m.inGrad = m.x.Grad()
		m.s.Close()
	}
	live := func() (n int) {
		for _, m := range mbs {
			if !m.y.Released() {
				n++
			}
		}
		return n
	}
	forward()
	forward()
	if got := live(); got != 2 {
		t.Fatalf("after two forwards %d micro-batches live, want 2", got)
	}
	backward(0)
	if !mbs[0].y.Released() || !mbs[0].inGrad.Released() || mbs[1].y.Released() {
		t.Fatalf("backward 0 released mb0 %v (grad %v), mb1 %v; want true, true, false",
			mbs[0].y.Released(), mbs[0].inGrad.Released(), mbs[1].y.Released())
	}
	forward()
	backward(1)
	backward(2)
	if got := live(); got != 0 {
		t.Fatalf("%d micro-batches live at the end", got)
	}
	if w.Grad() == nil || w.Grad().Released() {
		t.Fatal("the parameter's gradient did not survive the micro-batch scopes")
	}
	tmp := tensor.Ones(dev, tensor.F32, 3) // the step scope is innermost again
	step.Close()
	if !tmp.Released() {
		t.Error("tensor created after the micro-batches did not go to the step scope")
	}
}

func TestSuspendMisuse(t *testing.T) {
	dev := tensor.NewCPU()
	for _, tc := range []struct {
		name string
		f    func()
	}{
		{"suspend-not-innermost", func() {
			a := dev.NewScope()
			b := dev.NewScope()
			defer b.Close()
			defer a.Close()
			a.Suspend()
		}},
		{"suspend-twice", func() {
			a := dev.NewScope()
			defer a.Close()
			a.Suspend()
			a.Suspend()
		}},
		{"resume-open", func() {
			a := dev.NewScope()
			defer a.Close()
			a.Resume()
		}},
		{"resume-closed", func() {
			a := dev.NewScope()
			a.Suspend()
			a.Close()
			a.Resume()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			tc.f()
		})
	}
}
