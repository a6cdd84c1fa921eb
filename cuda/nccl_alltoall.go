package cuda

import (
	"context"

	"megago/cuda/internal/driver"
	"megago/parallel"
	"megago/tensor"
)

// AllToAllV exchanges every rank's send and receive counts over the group first
// (parallel.CheckAllToAllCounts, an all-gather of 2·Size() int64s), so a mismatch fails on
// every rank before any data moves. Then, as Megatron's token dispatcher does, it queues
// one ncclSend and one ncclRecv per peer with a non-zero count, sends before receives,
// between ncclGroupStart and ncclGroupEnd on the backend's stream, copies its own run
// device to device, and waits. It panics as parallel.CheckAllToAllV does.
func (c *Comm) AllToAllV(ctx context.Context, dst, src *tensor.Tensor, sendCounts, recvCounts []int) error {
	parallel.CheckAllToAllV(c, dst, src, sendCounts, recvCounts)
	if err := parallel.CheckAllToAllCounts(ctx, c, sendCounts, recvCounts); err != nil {
		return err
	}
	return c.run(ctx, "all-to-all", func() error {
		d, backD := c.onDevice(dst)
		defer backD()
		s, backS := c.onDevice(src)
		defer backS()
		return c.allToAllV(ctx, d, s, src.DType(), sendCounts, recvCounts)
	})
}

// allToAllV queues AllToAllV's copy and grouped sends and receives from device address s
// to d.
func (c *Comm) allToAllV(ctx context.Context, d, s driver.DevicePtr, dt tensor.DType, sendCounts, recvCounts []int) error {
	n, me, esz := c.Size(), c.Rank(), dt.Size()
	at := func(p driver.DevicePtr, counts []int, r int) driver.DevicePtr {
		off := 0
		for _, k := range counts[:r] {
			off += k
		}
		return p + driver.DevicePtr(off*esz)
	}
	if k := sendCounts[me]; k > 0 {
		if err := c.gpu.dtod(at(d, recvCounts, me), at(s, sendCounts, me), int64(k*esz)); err != nil {
			return err
		}
	}
	if n == 1 {
		return nil
	}
	if err := c.nccl.GroupStart(); err != nil {
		return err
	}
	stream := c.gpu.mainStream()
	for k := 1; k < n; k++ {
		if to := (me + k) % n; sendCounts[to] > 0 {
			if err := c.nccl.Send(ctx, at(s, sendCounts, to), sendCounts[to], ncclType(dt), to, c.h, stream); err != nil {
				c.nccl.GroupEnd()
				return err
			}
		}
	}
	for k := 1; k < n; k++ {
		if from := (me - k + n) % n; recvCounts[from] > 0 {
			if err := c.nccl.Recv(ctx, at(d, recvCounts, from), recvCounts[from], ncclType(dt), from, c.h, stream); err != nil {
				c.nccl.GroupEnd()
				return err
			}
		}
	}
	return c.nccl.GroupEnd()
}
