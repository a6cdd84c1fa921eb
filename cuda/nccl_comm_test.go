package cuda

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"megago/cuda/internal/driver"
	"megago/cuda/internal/nccl"
	"megago/parallel"
	"megago/tensor"
)

func TestUniqueIDWordsRoundTrip(t *testing.T) {
	var id nccl.UniqueID
	r := rand.New(rand.NewPCG(1, 1))
	for i := range id.Internal {
		id.Internal[i] = byte(r.IntN(256))
	}
	if got := wordsID(idWords(id)); got != id {
		t.Errorf("round trip changed the id")
	}
}

func TestNCCLMappings(t *testing.T) {
	types := map[tensor.DType]int32{tensor.F64: 8, tensor.F32: 7, tensor.BF16: 9, tensor.F16: 6, tensor.I32: 2, tensor.I64: 4}
	for dt, want := range types {
		if got := ncclType(dt); got != want {
			t.Errorf("ncclType(%v) = %d, want %d", dt, got, want)
		}
	}
	ops := map[parallel.Op]int32{parallel.Sum: 0, parallel.Max: 2, parallel.Min: 3, parallel.Avg: 4}
	for op, want := range ops {
		if got := ncclOp(op); got != want {
			t.Errorf("ncclOp(%v) = %d, want %d", op, got, want)
		}
	}
}

func TestCheckGatherPanics(t *testing.T) {
	dev := tensor.NewCPU()
	defer func() {
		if recover() == nil {
			t.Error("a gather into 5 elements from 2 over 2 ranks did not panic")
		}
	}()
	checkGather("all-gather", tensor.Zeros(dev, tensor.F32, 5), tensor.Zeros(dev, tensor.F32, 2), 2, true)
}

// requireNCCL skips the test when NCCL cannot be loaded.
func requireNCCL(t *testing.T) {
	t.Helper()
	if _, err := nccl.Load(DefaultSearchEnv()); err != nil {
		t.Skipf("needs NCCL: %v", err)
	}
}

// ncclSuite runs every collective on c (rank r of n, tensors on dev) and checks the
// results against values computed from the definition.
func ncclSuite(ctx context.Context, c parallel.Comm, dev *tensor.Device) error {
	n, r := c.Size(), c.Rank()
	contrib := func(rank, i int) float64 { return float64((rank*10+i)%13 - 6) }
	for _, dt := range []tensor.DType{tensor.F32, tensor.BF16, tensor.I64, tensor.F64} {
		for _, op := range []parallel.Op{parallel.Sum, parallel.Max, parallel.Min} {
			vals := make([]float64, 7)
			for i := range vals {
				vals[i] = contrib(r, i)
			}
			x := tensor.FromSlice(dev, vals, 7).Cast(dt)
			if err := c.AllReduce(ctx, x, op); err != nil {
				return err
			}
			got := values(x)
			for i := range got {
				want := contrib(0, i)
				for q := 1; q < n; q++ {
					switch op {
					case parallel.Sum:
						want += contrib(q, i)
					case parallel.Max:
						want = max(want, contrib(q, i))
					case parallel.Min:
						want = min(want, contrib(q, i))
					}
				}
				if got[i] != want {
					return fmt.Errorf("all-reduce %v %v: element %d = %v, want %v", op, dt, i, got[i], want)
				}
			}
		}
	}
	src := tensor.Full(dev, tensor.F32, float64(r+1), 3)
	dst := tensor.Zeros(dev, tensor.F32, 3*n)
	if err := c.AllGather(ctx, dst, src); err != nil {
		return err
	}
	for i, v := range values(dst) {
		if v != float64(i/3+1) {
			return fmt.Errorf("all-gather: element %d = %v", i, v)
		}
	}
	big := tensor.Arange(dev, tensor.F32, 0, 1, 2*n)
	part := tensor.Zeros(dev, tensor.F32, 2)
	if err := c.ReduceScatter(ctx, part, big, parallel.Sum); err != nil {
		return err
	}
	if got := values(part); got[0] != float64(2*r*n) || got[1] != float64((2*r+1)*n) {
		return fmt.Errorf("reduce-scatter: %v", got)
	}
	b := tensor.Full(dev, tensor.I64, float64(100+r), 4)
	if err := c.Broadcast(ctx, b, n-1); err != nil {
		return err
	}
	if got := values(b); got[0] != float64(100+n-1) {
		return fmt.Errorf("broadcast: %v", got)
	}
	if err := checkAllToAllV(ctx, c, dev); err != nil {
		return err
	}
	return c.Barrier(ctx)
}

func TestNCCLCommWorldSizeOne(t *testing.T) {
	b := openTestBackend(t)
	if _, ok := b.dev.(*realGPU); ok {
		requireNCCL(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := parallel.RunLocal(1, func(boot parallel.Comm) error {
		c, err := NewComm(ctx, boot, b)
		if err != nil {
			return err
		}
		defer c.Close()
		if err := ncclSuite(ctx, c, tensor.NewDevice(b)); err != nil {
			return err
		}
		sub, err := c.Split(ctx, "sub", 0, 0)
		if err != nil {
			return err
		}
		defer sub.(*Comm).Close()
		return ncclSuite(ctx, sub, tensor.NewDevice(b))
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestNCCLCommMultiGPU runs the suite and a send/recv ring on one goroutine rank per GPU.
// It needs two or more GPUs.
func TestNCCLCommMultiGPU(t *testing.T) {
	drv, err := driver.Load(DefaultSearchEnv())
	if errors.Is(err, ErrNoDevice) {
		t.Skipf("needs two or more CUDA GPUs: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	n, err := drv.DeviceCount()
	if err != nil || n < 2 {
		t.Skipf("needs two or more CUDA GPUs, %d visible (%v)", n, err)
	}
	requireNCCL(t)
	ncclRanks(t, n, func(r int) Config { return Config{Device: r} }, func(ctx context.Context, _ parallel.Comm, c *Comm, dev *tensor.Device) error {
		if err := ncclSuite(ctx, c, dev); err != nil {
			return err
		}
		// Every rank sends to the next before receiving from the previous: Send must not
		// wait for its Recv.
		r := c.Rank()
		out := tensor.Full(dev, tensor.F32, float64(r), 5)
		in := tensor.Zeros(dev, tensor.F32, 5)
		if err := c.Send(ctx, out, (r+1)%n); err != nil {
			return err
		}
		if err := c.Recv(ctx, in, (r+n-1)%n); err != nil {
			return err
		}
		if got := values(in); !slices.Equal(got, []float64{float64((r + n - 1) % n), float64((r + n - 1) % n), float64((r + n - 1) % n), float64((r + n - 1) % n), float64((r + n - 1) % n)}) {
			return fmt.Errorf("rank %d received %v", r, got)
		}
		return nil
	})
}

// ncclRanks runs fn on n goroutine ranks, each with a Backend opened with cfg(rank) and
// its NCCL Comm built over the in-process transport (boot).
func ncclRanks(t *testing.T, n int, cfg func(rank int) Config, fn func(ctx context.Context, boot parallel.Comm, c *Comm, dev *tensor.Device) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := parallel.RunLocal(n, func(boot parallel.Comm) error {
		b, err := Open(cfg(boot.Rank()))
		if err != nil {
			return err
		}
		defer b.Close()
		c, err := NewComm(ctx, boot, b)
		if err != nil {
			return err
		}
		defer c.Close()
		return fn(ctx, boot, c, tensor.NewDevice(b))
	})
	if err != nil {
		t.Fatal(err)
	}
}
