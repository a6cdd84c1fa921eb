package cuda

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"megago/parallel"
	"megago/tensor"
)

// The NCCL Comm with goroutine ranks on the kernel emulator (MEGAGO_CUDA_EMU=1): each
// rank opens its own emulator Backend and builds its Comm with NewComm over the
// in-process transport, as a program with --ranks N does.

// emulatedRanks runs fn on n goroutine ranks, each with an emulator Backend and its NCCL
// Comm built over the in-process transport (boot).
func emulatedRanks(t *testing.T, n int, fn func(ctx context.Context, boot parallel.Comm, c *Comm, dev *tensor.Device) error) {
	t.Helper()
	requireEmulator(t)
	ncclRanks(t, n, func(int) Config { return Config{Search: emulatorEnv()} }, fn)
}

// TestNCCLCommEmulated runs the definition suite, then a sequence of calls on random
// inputs whose results must equal bit for bit those of the in-process transport on the
// same inputs (both reduce in rank order), then the suite on the groups of a Split.
func TestNCCLCommEmulated(t *testing.T) {
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
			emulatedRanks(t, n, func(ctx context.Context, boot parallel.Comm, c *Comm, dev *tensor.Device) error {
				if err := ncclSuite(ctx, c, dev); err != nil {
					return err
				}
				for _, call := range commCalls() {
					if err := matchLocal(ctx, call, c, boot, dev); err != nil {
						return err
					}
				}
				sub, err := c.Split(ctx, "parity", boot.Rank()%2, 0)
				if err != nil {
					return err
				}
				defer sub.(*Comm).Close()
				return ncclSuite(ctx, sub, dev)
			})
		})
	}
}

// commCall is a sequence of communication calls on c whose results it returns; inputs
// come from a generator seeded by the rank, the same on both transports.
type commCall struct {
	name string
	run  func(ctx context.Context, c parallel.Comm, dev *tensor.Device, r *rand.Rand) ([]*tensor.Tensor, error)
}

// randomTensor returns n values in [-3, 3) rounded to dt, on dev.
func randomTensor(dev *tensor.Device, r *rand.Rand, dt tensor.DType, n int) *tensor.Tensor {
	v := make([]float64, n)
	for i := range v {
		v[i] = 6*r.Float64() - 3
		if dt == tensor.I32 || dt == tensor.I64 {
			v[i] = float64(r.IntN(1000) - 500)
		}
	}
	return tensor.FromSlice(dev, v, n).Cast(dt)
}

// commCalls are the calls compared between the two transports: every dtype NCCL gets
// from the Comm, odd lengths, every reduction, and point-to-point on a ring.
func commCalls() []commCall {
	var calls []commCall
	floats, ints := []tensor.DType{tensor.F32, tensor.BF16, tensor.F16, tensor.F64}, []tensor.DType{tensor.I32, tensor.I64}
	for _, dt := range append(floats, ints...) {
		ops := []parallel.Op{parallel.Sum, parallel.Avg, parallel.Max}
		if slices.Contains(ints, dt) {
			ops = []parallel.Op{parallel.Sum, parallel.Min}
		}
		for _, op := range ops {
			calls = append(calls, commCall{fmt.Sprintf("all-reduce %v %v", op, dt), func(ctx context.Context, c parallel.Comm, dev *tensor.Device, r *rand.Rand) ([]*tensor.Tensor, error) {
				x := randomTensor(dev, r, dt, 37)
				return []*tensor.Tensor{x}, c.AllReduce(ctx, x, op)
			}})
		}
	}
	for _, dt := range []tensor.DType{tensor.F32, tensor.BF16} {
		calls = append(calls, commCall{"all-gather, reduce-scatter, broadcast " + dt.String(), func(ctx context.Context, c parallel.Comm, dev *tensor.Device, r *rand.Rand) ([]*tensor.Tensor, error) {
			n := c.Size()
			src, all := randomTensor(dev, r, dt, 5), tensor.Zeros(dev, dt, 5*n)
			if err := c.AllGather(ctx, all, src); err != nil {
				return nil, err
			}
			big, part := randomTensor(dev, r, dt, 4*n), tensor.Zeros(dev, dt, 4)
			if err := c.ReduceScatter(ctx, part, big, parallel.Avg); err != nil {
				return nil, err
			}
			b := randomTensor(dev, r, dt, 9)
			return []*tensor.Tensor{all, part, b}, c.Broadcast(ctx, b, n-1)
		}})
	}
	calls = append(calls, commCall{"send/recv ring", func(ctx context.Context, c parallel.Comm, dev *tensor.Device, r *rand.Rand) ([]*tensor.Tensor, error) {
		// Every rank sends two messages to the next before receiving from the previous:
		// Send must not wait for its Recv, and messages keep their order.
		n, me := c.Size(), c.Rank()
		for _, size := range []int{6, 11} {
			if err := c.Send(ctx, randomTensor(dev, r, tensor.F32, size), (me+1)%n); err != nil {
				return nil, err
			}
		}
		a, b := tensor.Zeros(dev, tensor.F32, 6), tensor.Zeros(dev, tensor.F32, 11)
		if err := c.Recv(ctx, a, (me+n-1)%n); err != nil {
			return nil, err
		}
		return []*tensor.Tensor{a, b}, c.Recv(ctx, b, (me+n-1)%n)
	}})
	calls = append(calls, commCall{"all-reduce of a host tensor", func(ctx context.Context, c parallel.Comm, _ *tensor.Device, r *rand.Rand) ([]*tensor.Tensor, error) {
		x := randomTensor(tensor.NewCPU(), r, tensor.F32, 13) // copied through the device
		return []*tensor.Tensor{x}, c.AllReduce(ctx, x, parallel.Sum)
	}})
	return calls
}

// matchLocal runs call on the NCCL Comm c (tensors on dev) and on the in-process
// transport boot (tensors on the CPU) and compares the results bit for bit.
func matchLocal(ctx context.Context, call commCall, c *Comm, boot parallel.Comm, dev *tensor.Device) error {
	seed := func() *rand.Rand { return rand.New(rand.NewPCG(11, uint64(boot.Rank()))) }
	got, err := call.run(ctx, c, dev, seed())
	if err != nil {
		return fmt.Errorf("%s on NCCL: %w", call.name, err)
	}
	want, err := call.run(ctx, boot, tensor.NewCPU(), seed())
	if err != nil {
		return fmt.Errorf("%s in process: %w", call.name, err)
	}
	for i := range want {
		g, w := values(got[i]), values(want[i])
		if !slices.Equal(g, w) {
			return fmt.Errorf("rank %d: %s: result %d is %v on NCCL, %v in process", boot.Rank(), call.name, i, g, w)
		}
	}
	return nil
}

// TestNCCLCommEmulatedFailures checks that the emulated NCCL fails instead of hanging: a
// receive whose context expires, and a collective whose peer has closed its Comm; both
// abort the communicator.
func TestNCCLCommEmulatedFailures(t *testing.T) {
	emulatedRanks(t, 2, func(ctx context.Context, boot parallel.Comm, c *Comm, dev *tensor.Device) error {
		x := tensor.Ones(dev, tensor.F32, 3)
		if boot.Rank() == 1 {
			if err := boot.Barrier(ctx); err != nil { // rank 0's receive has timed out
				return err
			}
			return c.Close() // leaves without joining rank 0's all-reduce
		}
		short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		if err := c.Recv(short, x, 1); !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("receive from a silent peer: %v, want the deadline", err)
		}
		if err := c.AllReduce(ctx, x, parallel.Sum); err == nil {
			return errors.New("a call after an aborted one succeeded")
		}
		return boot.Barrier(ctx)
	})
	emulatedRanks(t, 2, func(ctx context.Context, boot parallel.Comm, c *Comm, dev *tensor.Device) error {
		if boot.Rank() == 1 {
			return c.Close()
		}
		var pe *parallel.Error
		if err := c.AllReduce(ctx, tensor.Ones(dev, tensor.F32, 3), parallel.Sum); !errors.As(err, &pe) || pe.Op != "all-reduce" {
			return fmt.Errorf("all-reduce with a peer gone: %v, want a *parallel.Error of the all-reduce", err)
		}
		return nil
	})
}
