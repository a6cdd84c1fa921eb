// Command mlp trains a two-layer perceptron on a three-armed spiral with megago's autograd
// engine, on the CPU backend (or -device cuda), printing the falling loss. It is the smallest complete training
// loop in megago: parameters outside any scope, one scope per step, Backward, and an SGD
// update written with in-place tensor ops.
//
//	go run ./examples/mlp [-steps 300] [-hidden 64] [-lr 0.5] [-device cpu|cuda]
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"

	"megago/internal/device"
	"megago/tensor"
)

func main() {
	steps := flag.Int("steps", 300, "training steps (full batch)")
	hidden := flag.Int("hidden", 64, "hidden units")
	lr := flag.Float64("lr", 0.5, "SGD learning rate")
	points := flag.Int("points", 200, "points per class")
	seed := flag.Uint64("seed", 1234, "random seed")
	name := flag.String("device", "cpu", "tensor backend to train on: cpu or cuda")
	flag.Parse()
	dev, err := device.Open(*name)
	if err == nil {
		_, err = run(os.Stdout, dev, *steps, *hidden, *points, *lr, *seed)
		err = errors.Join(err, device.Close(dev))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "mlp:", err)
		os.Exit(1)
	}
}

const classes = 3

// spiral returns n points per class on three interleaved spiral arms: x [3n, 2] and the
// class of each point.
func spiral(n int, rng tensor.RNG, dev *tensor.Device) (x, y *tensor.Tensor) {
	noise := tensor.ToSlice[float64](rng.Named("noise").Normal(dev, tensor.F64, tensor.Whole(classes*n), 0, 0.2))
	xs := make([]float32, 0, classes*n*2)
	ys := make([]int64, 0, classes*n)
	for c := 0; c < classes; c++ {
		for i := 0; i < n; i++ {
			r := float64(i) / float64(n)
			theta := float64(c)*4 + 4*r + noise[c*n+i]
			xs = append(xs, float32(r*math.Sin(theta)), float32(r*math.Cos(theta)))
			ys = append(ys, int64(c))
		}
	}
	return tensor.FromSlice(dev, xs, classes*n, 2), tensor.FromSlice(dev, ys)
}

// mlp is x → tanh(x·W1 + b1) → ·W2 + b2 → logits.
type mlp struct {
	w1, b1, w2, b2 *tensor.Tensor
}

func newMLP(dev *tensor.Device, rng tensor.RNG, in, hidden, out int) *mlp {
	param := func(name string, std float64, shape ...int) *tensor.Tensor {
		return rng.Named(name).Normal(dev, tensor.F32, tensor.Whole(shape...), 0, std).SetRequiresGrad(true)
	}
	return &mlp{
		w1: param("w1", 1/math.Sqrt(float64(in)), in, hidden),
		b1: tensor.Zeros(dev, tensor.F32, hidden).SetRequiresGrad(true),
		w2: param("w2", 1/math.Sqrt(float64(hidden)), hidden, out),
		b2: tensor.Zeros(dev, tensor.F32, out).SetRequiresGrad(true),
	}
}

func (m *mlp) forward(x *tensor.Tensor) *tensor.Tensor {
	h := tensor.Tanh(tensor.Add(tensor.MatMul(x, m.w1), m.b1)) // [N, H]
	return tensor.Add(tensor.MatMul(h, m.w2), m.b2)            // [N, classes]
}

func (m *mlp) params() []*tensor.Tensor { return []*tensor.Tensor{m.w1, m.b1, m.w2, m.b2} }

// run trains on dev and reports to w; it returns the loss of every step.
func run(w io.Writer, dev *tensor.Device, steps, hidden, points int, lr float64, seed uint64) ([]float64, error) {
	if steps < 1 || hidden < 1 || points < 1 || !(lr > 0) {
		return nil, fmt.Errorf("need steps, hidden and points ≥ 1 and lr > 0 (got %d, %d, %d, %g)", steps, hidden, points, lr)
	}
	rng := tensor.NewRNG(seed)
	x, y := spiral(points, rng.Named("data"), dev)
	model := newMLP(dev, rng.Named("init"), 2, hidden, classes)

	var losses []float64
	fmt.Fprintf(w, "training a 2-%d-%d MLP on %d spiral points, SGD lr %g\n", hidden, classes, classes*points, lr)
	for step := 1; step <= steps; step++ {
		s := dev.NewScope()
		loss := tensor.CrossEntropy(model.forward(x), y, tensor.CrossEntropyOptions{})
		loss.Backward()
		losses = append(losses, loss.Item())
		if step == 1 || step%25 == 0 || step == steps {
			fmt.Fprintf(w, "step %4d  loss %.4f\n", step, losses[step-1])
		}
		for _, p := range model.params() {
			p.Axpy(-lr, p.Grad())
			p.ZeroGrad()
		}
		s.Close()
	}

	s := dev.NewScope()
	defer s.Close()
	var acc float64
	dev.NoGrad(func() { acc = accuracy(model.forward(x), y) })
	fmt.Fprintf(w, "training accuracy %.1f%% (chance %.1f%%); pool: %d bytes fresh, %d in use\n",
		100*acc, 100.0/classes, dev.Stats().Fresh, dev.Stats().InUse)
	return losses, nil
}

func accuracy(logits, y *tensor.Tensor) float64 {
	_, pred := tensor.Max(logits, -1)
	p, t := tensor.ToSlice[int64](pred), tensor.ToSlice[int64](y)
	right := 0
	for i := range p {
		if p[i] == t[i] {
			right++
		}
	}
	return float64(right) / float64(len(p))
}
