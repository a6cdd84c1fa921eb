package parallel

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"megago/tensor"
)

var bg = context.Background()

func TestLocalReductionIsInRankOrder(t *testing.T) {
	// Values chosen so that float32 addition is not associative: the result must be
	// ((x0 + x1) + x2) + x3 exactly, on every rank and every run.
	vals := []float32{1e8, 1, -1e8, 0.5}
	want := ((vals[0] + vals[1]) + vals[2]) + vals[3]
	for run := 0; run < 3; run++ {
		var mu sync.Mutex
		got := map[int]float32{}
		err := RunLocal(4, func(c Comm) error {
			x := tensor.FromSlice(tensor.NewCPU(), []float32{vals[c.Rank()]})
			if err := c.AllReduce(bg, x, Sum); err != nil {
				return err
			}
			mu.Lock()
			got[c.Rank()] = tensor.ToSlice[float32](x)[0]
			mu.Unlock()
			return nil
		})
		require.NoError(t, err)
		for r := 0; r < 4; r++ {
			assert.Equal(t, math.Float32bits(want), math.Float32bits(got[r]), "rank %d run %d", r, run)
		}
	}
}

func TestLocalSplit(t *testing.T) {
	// 6 ranks split by parity, keyed in reverse: evens [4 2 0], odds [5 3 1].
	err := RunLocal(6, func(c Comm) error {
		g, err := c.Split(bg, "parity", c.Rank()%2, -c.Rank())
		if err != nil {
			return err
		}
		members := make([]int, g.Size())
		for i := range members {
			members[i] = g.WorldRank(i)
		}
		want := []int{4, 2, 0}
		if c.Rank()%2 == 1 {
			want = []int{5, 3, 1}
		}
		if fmt.Sprint(members) != fmt.Sprint(want) || g.WorldRank(g.Rank()) != c.Rank() || g.Name() != "parity" {
			return fmt.Errorf("group %v, rank %d", members, g.Rank())
		}
		x := tensor.FromSlice(tensor.NewCPU(), []int64{int64(c.Rank())})
		if err := g.AllReduce(bg, x, Sum); err != nil {
			return err
		}
		if s := tensor.ToSlice[int64](x)[0]; s != int64(want[0]+want[1]+want[2]) {
			return fmt.Errorf("sum %d", s)
		}
		none, err := c.Split(bg, "none", -1, 0)
		if err != nil || none != nil {
			return fmt.Errorf("negative color gave %v, %v", none, err)
		}
		return nil
	})
	require.NoError(t, err)
}

// runFailing runs a job in which ranks behave as given and returns RunLocal's error,
// failing the test if it takes longer than a few seconds (a hang).
func runFailing(t *testing.T, n int, o LocalOptions, fn func(c Comm) error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- RunLocalWith(n, o, fn) }()
	select {
	case err := <-done:
		require.Error(t, err)
		return err
	case <-time.After(5 * time.Second):
		t.Fatal("job hung")
		return nil
	}
}

func TestLocalAbort(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fail  func(c Comm) error
		cause string
	}{
		{"error", func(c Comm) error { return errors.New("disk on fire") }, "rank 2 failed: disk on fire"},
		{"panic", func(c Comm) error { panic("index out of range") }, "rank 2 failed: panic: index out of range"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			peerErrs := map[int]error{}
			err := runFailing(t, 4, LocalOptions{}, func(c Comm) error {
				if c.Rank() == 2 {
					time.Sleep(20 * time.Millisecond) // let the others block first
					return tc.fail(c)
				}
				x := tensor.Ones(tensor.NewCPU(), tensor.F32, 8)
				err := c.AllReduce(bg, x, Sum)
				mu.Lock()
				peerErrs[c.Rank()] = err
				mu.Unlock()
				return err
			})
			assert.Contains(t, err.Error(), tc.cause)
			for _, r := range []int{0, 1, 3} {
				var ce *Error
				require.ErrorAs(t, peerErrs[r], &ce, "rank %d", r)
				assert.Equal(t, "all-reduce", ce.Op)
				assert.Equal(t, r, ce.Rank)
				assert.Contains(t, ce.Error(), fmt.Sprintf("parallel: all-reduce on group world rank %d of 4: aborted: rank 2 failed", r))
			}
		})
	}
}

func TestLocalMismatch(t *testing.T) {
	for _, tc := range []struct {
		name string
		fn   func(c Comm, dev *tensor.Device) error
		want string
	}{
		{"kind", func(c Comm, dev *tensor.Device) error {
			if c.Rank() == 0 {
				return c.AllReduce(bg, tensor.Ones(dev, tensor.F32, 4), Sum)
			}
			return c.AllGather(bg, tensor.Ones(dev, tensor.F32, 8), tensor.Ones(dev, tensor.F32, 4))
		}, "mismatched collectives: rank 0 called all-reduce(sum) float32×4, rank 1 called all-gather float32×4"},
		{"size", func(c Comm, dev *tensor.Device) error {
			return c.AllReduce(bg, tensor.Ones(dev, tensor.F32, 4+c.Rank()), Sum)
		}, "rank 0 called all-reduce(sum) float32×4, rank 1 called all-reduce(sum) float32×5"},
		{"dtype", func(c Comm, dev *tensor.Device) error {
			dt := []tensor.DType{tensor.F32, tensor.BF16}[c.Rank()]
			return c.AllReduce(bg, tensor.Ones(dev, dt, 4), Sum)
		}, "rank 1 called all-reduce(sum) bfloat16×4"},
		{"op", func(c Comm, dev *tensor.Device) error {
			return c.AllReduce(bg, tensor.Ones(dev, tensor.F32, 4), []Op{Sum, Max}[c.Rank()])
		}, "rank 1 called all-reduce(max)"},
		{"root", func(c Comm, dev *tensor.Device) error {
			return c.Broadcast(bg, tensor.Ones(dev, tensor.F32, 4), c.Rank())
		}, "rank 0 called broadcast(root 0) float32×4, rank 1 called broadcast(root 1)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := make([]error, 2)
			runFailing(t, 2, LocalOptions{}, func(c Comm) error {
				errs[c.Rank()] = tc.fn(c, tensor.NewCPU())
				return errs[c.Rank()]
			})
			for r, err := range errs {
				require.Error(t, err, "rank %d", r)
				assert.Contains(t, err.Error(), tc.want, "rank %d", r)
			}
		})
	}
}

func TestLocalWaitingOnReturnedRank(t *testing.T) {
	err := runFailing(t, 3, LocalOptions{}, func(c Comm) error {
		if c.Rank() == 1 {
			return nil // forgets the collective
		}
		return c.Barrier(bg)
	})
	assert.Contains(t, err.Error(), "waits in barrier on group world for rank 1, which has returned")

	err = runFailing(t, 2, LocalOptions{}, func(c Comm) error {
		if c.Rank() == 0 {
			return nil
		}
		return c.Recv(bg, tensor.Zeros(tensor.NewCPU(), tensor.F32, 2), 0)
	})
	assert.Contains(t, err.Error(), "rank 1 waits in recv from rank 0 on group world for rank 0, which has returned")
}

func TestLocalDeadlock(t *testing.T) {
	// Both ranks receive first: nobody can make progress.
	err := runFailing(t, 2, LocalOptions{StallTimeout: 50 * time.Millisecond}, func(c Comm) error {
		return c.Recv(bg, tensor.Zeros(tensor.NewCPU(), tensor.F32, 2), 1-c.Rank())
	})
	assert.Contains(t, err.Error(), "deadlock: every running rank has been blocked for 50ms")
	assert.Contains(t, err.Error(), "rank 0 waits in recv from rank 1")
}

func TestLocalSlowRankIsNotADeadlock(t *testing.T) {
	// Rank 1 computes for longer than the stall timeout before joining: rank 0 alone is
	// blocked, so this is not a deadlock.
	err := RunLocalWith(2, LocalOptions{StallTimeout: 20 * time.Millisecond}, func(c Comm) error {
		if c.Rank() == 1 {
			time.Sleep(100 * time.Millisecond)
		}
		return c.Barrier(bg)
	})
	require.NoError(t, err)
}

func TestLocalContextCancel(t *testing.T) {
	err := runFailing(t, 2, LocalOptions{}, func(c Comm) error {
		if c.Rank() == 1 {
			time.Sleep(200 * time.Millisecond)
			return c.Barrier(bg)
		}
		ctx, cancel := context.WithTimeout(bg, 20*time.Millisecond)
		defer cancel()
		return c.Barrier(ctx)
	})
	assert.Contains(t, err.Error(), "rank 0: parallel: barrier on group world rank 0 of 2: context deadline exceeded")
}

func TestLocalSendRecv(t *testing.T) {
	err := RunLocal(3, func(c Comm) error {
		dev := tensor.NewCPU()
		next, prev := (c.Rank()+1)%3, (c.Rank()+2)%3
		// Send is buffered, so a ring of send-then-receive cannot deadlock.
		for i := 0; i < 3; i++ {
			if err := c.Send(bg, tensor.Full(dev, tensor.F64, float64(10*c.Rank()+i), 2), next); err != nil {
				return err
			}
		}
		for i := 0; i < 3; i++ {
			got := tensor.Zeros(dev, tensor.F64, 2)
			if err := c.Recv(bg, got, prev); err != nil {
				return err
			}
			if v := tensor.ToSlice[float64](got); v[0] != float64(10*prev+i) || v[1] != v[0] {
				return fmt.Errorf("message %d from %d: %v", i, prev, v)
			}
		}
		bad := tensor.Zeros(dev, tensor.F32, 3)
		if c.Rank() == 0 {
			return c.Send(bg, tensor.Zeros(dev, tensor.F32, 2), 1)
		}
		if c.Rank() == 1 {
			err := c.Recv(bg, bad, 0)
			if err == nil || !strings.Contains(err.Error(), "peer 0: got float32×2, want float32×3") {
				return fmt.Errorf("size mismatch gave %v", err)
			}
		}
		return nil
	})
	require.NoError(t, err)
}
