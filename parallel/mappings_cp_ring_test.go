package parallel

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"megago/tensor"
)

// TestStartRingShift: on a ring of 3, each rank receives its previous rank's tensors
// and, in backward, each rank's input gets the gradient its next rank applied to what it
// received (values written out by hand: rank r holds r+1 and r+10, the gradient at rank
// r is 100·(r+1)).
func TestStartRingShift(t *testing.T) {
	require.NoError(t, RunLocal(3, func(c Comm) error {
		dev := tensor.NewCPU()
		r := float64(c.Rank())
		a := tensor.FromSlice(dev, []float64{r + 1, r + 1}, 2)
		b := tensor.FromSlice(dev, []float64{r + 10}, 1)
		a.SetRequiresGrad(true)
		b.SetRequiresGrad(true)
		got := StartRingShift(context.Background(), c, nil, 0, a, b)()
		prev := float64((c.Rank() + 2) % 3)
		assert.Equal(t, []float64{prev + 1, prev + 1}, tensor.ToSlice[float64](got[0]), "rank %d", c.Rank())
		assert.Equal(t, []float64{prev + 10}, tensor.ToSlice[float64](got[1]), "rank %d", c.Rank())
		g := 100 * (r + 1)
		tensor.Add(tensor.Sum(tensor.Scale(got[0], g)), tensor.Sum(tensor.Scale(got[1], 2*g))).Backward()
		next := 100 * float64((c.Rank()+1)%3+1)
		assert.Equal(t, []float64{next, next}, tensor.ToSlice[float64](a.Grad()), "rank %d", c.Rank())
		assert.Equal(t, []float64{2 * next}, tensor.ToSlice[float64](b.Grad()), "rank %d", c.Rank())
		return nil
	}))
}
