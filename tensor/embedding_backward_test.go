package tensor_test

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"megago/tensor"
)

// TestEmbeddingBackwardF32: the float32 gradient of an embedding table with wide rows
// (vector loops and their tails) and repeated ids equals a loop adding each position's
// gradient row into its id's row in position order, in float32.
func TestEmbeddingBackwardF32(t *testing.T) {
	for _, c := range []int{3, 100, 256} {
		const v, n = 7, 300
		r := rand.New(rand.NewPCG(uint64(c), 1))
		dev := tensor.NewCPU()
		w := tensor.Zeros(dev, tensor.F32, v, c).SetRequiresGrad(true)
		ids := make([]int64, n)
		for i := range ids {
			ids[i] = int64(r.IntN(v))
		}
		dy := make([]float32, n*c)
		for i := range dy {
			dy[i] = float32(r.NormFloat64())
		}
		y := tensor.Embedding(w, tensor.FromSlice(dev, ids, n)) // [n, c]
		y.BackwardWithGrad(tensor.FromSlice(dev, dy, n, c))
		want := make([]float32, v*c)
		for i, id := range ids {
			for j := range c {
				want[int(id)*c+j] += dy[i*c+j]
			}
		}
		require.Equal(t, want, tensor.ToSlice[float32](w.Grad()), "C = %d", c)
	}
}
