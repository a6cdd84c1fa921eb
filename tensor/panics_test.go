package tensor_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"megago/tensor"
)

// Caller bugs panic with the op's name and the offending shapes or values.

// panicMessage runs f and returns what it panicked with, formatted.
func panicMessage(f func()) (msg string, panicked bool) {
	defer func() {
		if r := recover(); r != nil {
			msg, panicked = fmt.Sprint(r), true
		}
	}()
	f()
	return "", false
}

func TestPanics(t *testing.T) {
	dev := tensor.NewCPU()
	f64 := func(shape ...int) *tensor.Tensor { return tensor.Zeros(dev, tensor.F64, shape...) }
	i64 := func(v ...int64) *tensor.Tensor { return tensor.FromSlice(dev, v) }
	leaf := func(shape ...int) *tensor.Tensor { return f64(shape...).SetRequiresGrad(true) }
	cases := []struct {
		name string
		f    func()
		want []string // substrings of the message
	}{
		{"MatMul/inner_dims", func() { tensor.MatMul(f64(2, 3), f64(4, 5)) },
			[]string{"tensor: MatMul: [2 3] x [4 5]", "inner dims differ"}},
		{"MatMul/inner_dims_transB", func() { tensor.MatMulT(f64(2, 3), f64(3, 4), false, true) },
			[]string{"tensor: MatMul: [2 3] x [3 4]", "transB=true", "inner dims differ (3 vs 4)"}},
		{"MatMul/batch_dims", func() { tensor.MatMul(f64(2, 3, 4), f64(3, 4, 5)) },
			[]string{"tensor: MatMul: [2 3 4] x [3 4 5]", "batch dims differ"}},
		{"MatMul/1d", func() { tensor.MatMul(f64(3), f64(3, 2)) },
			[]string{"tensor: MatMul: [3] x [3 2]", "at least 2 dims"}},
		{"MatMul/dtype", func() { tensor.MatMul(f64(2, 3), tensor.Zeros(dev, tensor.F32, 3, 4)) },
			[]string{"tensor: MatMul: float64 [2 3] and float32 [3 4]: dtypes differ"}},
		{"Add/not_broadcastable", func() { tensor.Add(f64(2, 3), f64(4)) },
			[]string{"tensor: Add: [2 3] and [4] do not broadcast"}},
		{"Mul/not_broadcastable", func() { tensor.Mul(f64(2, 3), f64(3, 2)) },
			[]string{"tensor: Mul: [2 3] and [3 2] do not broadcast"}},
		{"Sub/dtype", func() { tensor.Sub(f64(2), tensor.Zeros(dev, tensor.BF16, 2)) },
			[]string{"tensor: Sub: float64 [2] and bfloat16 [2]: dtypes differ"}},
		{"Where/not_broadcastable", func() { tensor.Where(i64(1, 0, 1), f64(2, 2), f64(2, 2)) },
			[]string{"tensor: Where:", "[3]", "do not broadcast"}},
		{"MaskedFill/mask_larger", func() { tensor.MaskedFill(f64(3, 4), f64(2, 3, 4), 0) },
			[]string{"tensor: MaskedFill: mask [2 3 4] does not broadcast to [3 4]"}},
		{"Reshape/count", func() { f64(2, 3).Reshape(4, 2) },
			[]string{"tensor: Reshape: [2 3] to [4 2]: element counts differ"}},
		{"Reshape/infer_not_divisible", func() { f64(2, 3).Reshape(-1, 4) },
			[]string{"tensor: Reshape: [2 3] to [-1 4]"}},
		{"Squeeze/not_1", func() { f64(2, 3).Squeeze(0) },
			[]string{"tensor: Squeeze: dim 0 of [2 3] has size 2, not 1"}},
		{"Narrow/past_end", func() { f64(3, 4).Narrow(1, 2, 3) },
			[]string{"tensor: Narrow: [2, 5) of dim 1 of [3 4] is out of range"}},
		{"Narrow/negative_start", func() { f64(3, 4).Narrow(0, -1, 2) },
			[]string{"tensor: Narrow: [-1, 1) of dim 0 of [3 4] is out of range"}},
		{"Narrow/dim", func() { f64(3, 4).Narrow(2, 0, 1) },
			[]string{"tensor: Narrow: dim 2 out of range for rank 2"}},
		{"Concat/shapes", func() { tensor.Concat(0, f64(2, 3), f64(2, 4)) },
			[]string{"tensor: Concat: shapes [2 3] and [2 4] differ outside dim 0"}},
		{"Concat/rank", func() { tensor.Concat(0, f64(2, 3), f64(6)) },
			[]string{"tensor: Concat: float64 [2 3] with float64 [6]"}},
		{"Concat/dtype", func() { tensor.Concat(1, f64(2, 3), tensor.Zeros(dev, tensor.F32, 2, 3)) },
			[]string{"tensor: Concat: float64 [2 3] with float32 [2 3]"}},
		{"Concat/none", func() { tensor.Concat(0) }, []string{"tensor: Concat: no tensors"}},
		{"Split/sizes", func() { tensor.Split(f64(3, 2), 0, 1, 1) },
			[]string{"tensor: Split: sizes [1 1] of dim 0 of [3 2] add up to 2"}},
		{"Chunk/indivisible", func() { tensor.Chunk(f64(5), 2, 0) },
			[]string{"tensor: Chunk: dim 0 of [5] (size 5) not divisible into 2 chunks"}},
		{"Permute/repeat", func() { f64(2, 3, 4).Permute(0, 0, 1) },
			[]string{"tensor: Permute: [0 0 1] of [2 3 4] repeats dim 0"}},
		{"Permute/count", func() { f64(2, 3, 4).Permute(1, 0) },
			[]string{"tensor: Permute: [1 0] of [2 3 4]: need 3 dims"}},
		{"Permute/out_of_range", func() { f64(2, 3, 4).Permute(0, 1, 3) },
			[]string{"tensor: Permute: dim 3 out of range for rank 3"}},
		{"Transpose/out_of_range", func() { f64(2, 3).Transpose(0, -3) },
			[]string{"tensor: Transpose: dim -3 out of range for rank 2"}},
		{"Expand/not_broadcastable", func() { f64(3).Expand(2, 4) },
			[]string{"tensor: Expand: [3] cannot broadcast to [2 4]"}},
		{"Expand/fewer_dims", func() { f64(2, 3).Expand(3) },
			[]string{"tensor: Expand: [2 3] cannot broadcast to [3]"}},
		{"Sum/dim", func() { tensor.Sum(f64(2, 3), 2) },
			[]string{"tensor: Sum: dim 2 out of range for rank 2"}},
		{"Max/dim", func() { tensor.Max(f64(2, 3), -3) },
			[]string{"tensor: Max: dim -3 out of range for rank 2"}},
		{"Max/empty", func() { tensor.Max(f64(2, 0), 1) },
			[]string{"tensor: Max: dim 1 of [2 0] is empty"}},
		{"Gather/index_out_of_range", func() { tensor.Gather(f64(2, 5), 1, tensor.FromSlice(dev, []int64{0, 5}, 2, 1)) },
			[]string{"tensor: Gather: index 5 out of range [0, 5)"}},
		{"Gather/index_shape", func() { tensor.Gather(f64(2, 5), 1, tensor.FromSlice(dev, []int64{0, 1, 2}, 3, 1)) },
			[]string{"tensor: Gather: index [3 1] and input [2 5] differ outside dim 1"}},
		{"Gather/float_index", func() { tensor.Gather(f64(2, 5), 1, f64(2, 1)) },
			[]string{"tensor: Gather: index float64 [2 1] for [2 5]"}},
		{"Embedding/id_out_of_range", func() { tensor.Embedding(f64(5, 3), i64(0, 7)) },
			[]string{"tensor: Embedding: id 7 at position 1 out of range [0, 5)"}},
		{"Embedding/negative_id", func() { tensor.Embedding(f64(5, 3), i64(-1)) },
			[]string{"tensor: Embedding: id -1 at position 0 out of range [0, 5)"}},
		{"Embedding/weight_rank", func() { tensor.Embedding(f64(5), i64(0, 1)) },
			[]string{"tensor: Embedding: weight [5] with ids int64 [2]"}},
		{"Embedding/float_ids", func() { tensor.Embedding(f64(5, 3), f64(2)) },
			[]string{"tensor: Embedding: weight [5 3] with ids float64 [2]"}},
		{"CrossEntropy/target_out_of_range", func() { tensor.CrossEntropy(f64(2, 5), i64(1, 9), tensor.CrossEntropyOptions{}) },
			[]string{"tensor: CrossEntropy: target 9 of row 1 out of range [0, 5)"}},
		{"CrossEntropy/negative_target_not_ignored", func() {
			tensor.CrossEntropy(f64(2, 5), i64(-100, 1), tensor.CrossEntropyOptions{})
		}, []string{"tensor: CrossEntropy: target -100 of row 0 out of range [0, 5)"}},
		{"CrossEntropy/target_out_of_range_large_vocab", func() { // rows are split across goroutines
			tensor.CrossEntropy(f64(64, 5000), tensor.Full(dev, tensor.I64, 5000, 64), tensor.CrossEntropyOptions{})
		}, []string{"tensor: CrossEntropy: target 5000 of row", "out of range [0, 5000)"}},
		{"CrossEntropy/target_shape", func() { tensor.CrossEntropy(f64(2, 5), i64(1, 2, 3), tensor.CrossEntropyOptions{}) },
			[]string{"tensor: CrossEntropy: logits [2 5] with targets int64 [3]"}},
		{"Softmax/mask", func() { tensor.Softmax(f64(2, 4), tensor.SoftmaxOptions{Mask: i64(1, 0, 1)}) },
			[]string{"tensor: Softmax: mask [3] does not broadcast to input [2 4]"}},
		{"LogSoftmax/scalar", func() { tensor.LogSoftmax(tensor.Scalar(dev, tensor.F64, 1), tensor.SoftmaxOptions{}) },
			[]string{"tensor: LogSoftmax: input is a scalar"}},
		{"LayerNorm/weight", func() { tensor.LayerNorm(f64(2, 5), f64(4), nil, 1e-5) },
			[]string{"tensor: LayerNorm: weight float64 [4] for input float64 [2 5]"}},
		{"LayerNorm/bias_dtype", func() { tensor.LayerNorm(f64(2, 5), nil, tensor.Zeros(dev, tensor.F32, 5), 1e-5) },
			[]string{"tensor: LayerNorm: weight float32 [5] for input float64 [2 5]"}},
		{"RMSNorm/weight", func() { tensor.RMSNorm(f64(2, 5), f64(5, 1), 1e-5) },
			[]string{"tensor: RMSNorm: weight float64 [5 1] for input float64 [2 5]"}},
		{"Dropout/p_1", func() { tensor.Dropout(f64(2), 1, tensor.NewRNG(1)) },
			[]string{"tensor: Dropout: probability 1 outside [0, 1)"}},
		{"Random/region_outside", func() {
			tensor.NewRNG(1).Uniform(dev, tensor.F32, tensor.Region{Full: tensor.Shape{16, 32}, Start: []int{8, 0}, Size: tensor.Shape{9, 32}}, 0, 1)
		}, []string{"tensor: Random: region start [8 0] size [9 32] outside [16 32]"}},
		{"Random/region_rank", func() {
			tensor.NewRNG(1).Normal(dev, tensor.F32, tensor.Region{Full: tensor.Shape{16, 32}, Start: []int{0}, Size: tensor.Shape{16, 32}}, 0, 1)
		}, []string{"tensor: Random: region start [0] size [16 32] in [16 32]: ranks differ"}},
		{"FromSlice/count", func() { tensor.FromSlice(dev, []float64{1, 2, 3}, 2, 2) },
			[]string{"tensor: FromSlice: 3 elements for shape [2 2]"}},
		{"Item/not_one_element", func() { f64(2).Item() },
			[]string{"tensor: Item: tensor of shape [2] has 2 elements"}},
		{"SetRequiresGrad/not_leaf", func() { tensor.Exp(leaf(2)).SetRequiresGrad(true) },
			[]string{"tensor: SetRequiresGrad: float64 [2] is the output of Exp, not a leaf"}},
		{"SetGrad/shape", func() { leaf(2).SetGrad(f64(3)) },
			[]string{"tensor: SetGrad: grad float64 [3] for tensor float64 [2]"}},
		{"Backward/non_scalar", func() { tensor.Exp(leaf(2, 3)).Backward() },
			[]string{"tensor: Backward: output of shape [2 3] is not a scalar; use BackwardWithGrad"}},
		{"BackwardWithGrad/shape", func() { tensor.Exp(leaf(2, 3)).BackwardWithGrad(f64(3)) },
			[]string{"tensor: Backward: gradient [3] for output [2 3]"}},
		{"Backward/counts", func() { tensor.Backward([]*tensor.Tensor{f64(1), f64(1)}, []*tensor.Tensor{f64(1)}) },
			[]string{"tensor: Backward: 2 outputs and 1 gradients"}},
		{"Backward/twice", func() {
			y := tensor.Sum(tensor.Mul(leaf(2), leaf(2)))
			y.Backward()
			y.Backward()
		}, []string{"tensor: Backward: the graph through Sum was already freed by an earlier backward"}},
		{"Backward/through_freed_intermediate", func() {
			h := tensor.Exp(leaf(2)) // shared by two losses; the first backward frees its node
			tensor.Sum(h).Backward()
			tensor.Mean(h).Backward()
		}, []string{"tensor: Backward: the graph through Exp was already freed by an earlier backward"}},
		{"Apply/no_inputs", func() { tensor.Apply("custom", &square{}) },
			[]string{"tensor: Apply custom: no inputs"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			msg, panicked := panicMessage(c.f)
			require.True(t, panicked, "no panic")
			for _, w := range c.want {
				assert.Contains(t, msg, w)
			}
		})
	}
}

// TestNoPanic checks calls at the edge of what is allowed.
func TestNoPanic(t *testing.T) {
	dev := tensor.NewCPU()
	x := tensor.Zeros(dev, tensor.F64, 3, 4)
	for name, f := range map[string]func(){
		"Narrow/empty_at_end": func() { x.Narrow(1, 4, 0) },
		"Narrow/whole":        func() { x.Narrow(0, 0, 3) },
		"Reshape/infer":       func() { x.Reshape(2, -1, 3) },
		"Permute/negative":    func() { x.Permute(-1, -2) },
		"CrossEntropy/ignored": func() {
			tensor.CrossEntropy(x, tensor.FromSlice(dev, []int64{-100, 1, 9}), tensor.CrossEntropyOptions{Ignore: true, IgnoreIndex: 9})
		},
		"Dropout/p_0":            func() { tensor.Dropout(x, 0, tensor.NewRNG(1)) },
		"Backward/no_grad_input": func() { tensor.Sum(x).Backward() },
	} {
		if msg, panicked := panicMessage(f); panicked && name != "CrossEntropy/ignored" {
			t.Errorf("%s panicked: %s", name, msg)
		}
	}
	// Ignore applies only to IgnoreIndex: the -100 above is still out of range.
	msg, panicked := panicMessage(func() {
		tensor.CrossEntropy(x, tensor.FromSlice(dev, []int64{-100, 1, 9}), tensor.CrossEntropyOptions{Ignore: true, IgnoreIndex: 9})
	})
	assert.True(t, panicked)
	assert.Contains(t, msg, "target -100 of row 0")
}
