package parallel

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"megago/tensor"
)

// TestP2PVariableShapes: activations of changing shape and dtype go forward around the
// ring and gradients backward; each arrives with the shape it was sent with.
func TestP2PVariableShapes(t *testing.T) {
	shapes := []tensor.Shape{{2, 3, 4}, {2, 5, 4}, {1, 1, 4}, {7}}
	dtypes := []tensor.DType{tensor.F32, tensor.F64, tensor.BF16, tensor.F32}
	for _, n := range []int{2, 3} {
		err := RunLocal(n, func(c Comm) error {
			ctx := context.Background()
			dev := tensor.NewCPU()
			p, err := NewP2P(ctx, c, dev, P2PShape{})
			if err != nil {
				return err
			}
			r := c.Rank()
			for i, s := range shapes {
				y := ranked(dev, i, r, s...).Detach().Cast(dtypes[i])
				if err := p.SendForward(ctx, y); err != nil {
					return err
				}
				g := ranked(dev, 10+i, r, s...).Detach().Cast(dtypes[i])
				if err := p.SendBackward(ctx, g); err != nil {
					return err
				}
			}
			for i, s := range shapes {
				x, err := p.RecvForward(ctx)
				if err != nil {
					return err
				}
				prev := (r + n - 1) % n
				assert.Equal(t, s, x.Shape(), "rank %d forward %d", r, i)
				assert.Equal(t, tensor.ToSlice[float64](ranked(dev, i, prev, s...).Detach().Cast(dtypes[i])), tensor.ToSlice[float64](x))
				dy, err := p.RecvBackward(ctx)
				if err != nil {
					return err
				}
				next := (r + 1) % n
				assert.Equal(t, s, dy.Shape())
				assert.Equal(t, tensor.ToSlice[float64](ranked(dev, 10+i, next, s...).Detach().Cast(dtypes[i])), tensor.ToSlice[float64](dy))
			}
			return nil
		})
		require.NoError(t, err, "%d ranks", n)
	}
}

// TestP2PCombinedCalls: both neighbours call a combined send-and-receive at the same time
// (each sends before it receives), on a fixed-shape P2P without headers.
func TestP2PCombinedCalls(t *testing.T) {
	fixed := P2PShape{Shape: tensor.Shape{2, 3}, DType: tensor.F64}
	err := RunLocal(2, func(c Comm) error {
		ctx := context.Background()
		dev := tensor.NewCPU()
		p, err := NewP2P(ctx, c, dev, fixed)
		if err != nil {
			return err
		}
		mine := ranked(dev, 1, c.Rank(), 2, 3).Detach()
		other := ranked(dev, 1, 1-c.Rank(), 2, 3).Detach()
		var got *tensor.Tensor
		if c.Rank() == 0 { // stage 0 sends an activation and waits for its gradient
			got, err = p.SendForwardRecvBackward(ctx, mine)
		} else { // stage 1 sends a gradient and waits for the next activation
			got, err = p.SendBackwardRecvForward(ctx, mine)
		}
		if err != nil {
			return err
		}
		assert.Equal(t, tensor.ToSlice[float64](other), tensor.ToSlice[float64](got))
		// And once more the other way round: Exchange with both directions.
		got, err = p.Exchange(ctx, Transfer{Send: mine, SendDir: Forward, RecvDir: Forward})
		if err != nil {
			return err
		}
		assert.Equal(t, tensor.ToSlice[float64](other), tensor.ToSlice[float64](got))
		return nil
	})
	require.NoError(t, err)
}

func TestP2PFixedShapeMismatchPanics(t *testing.T) {
	err := RunLocal(2, func(c Comm) error {
		dev := tensor.NewCPU()
		p, err := NewP2P(context.Background(), c, dev, P2PShape{Shape: tensor.Shape{2}, DType: tensor.F32})
		if err != nil {
			return err
		}
		if c.Rank() == 0 {
			return p.SendForward(context.Background(), tensor.Ones(dev, tensor.F32, 3))
		}
		_, err = p.RecvForward(context.Background())
		return err
	})
	require.ErrorContains(t, err, "P2P send: float32 [3], but the P2P's fixed shape is float32 [2]")
}
