package cuda

import (
	"context"
	"errors"

	"megago/tensor"
)

// Send sends t's elements to rank to without waiting for the matching Recv: the data is
// copied, in order with the kernels that produced it, into a staging buffer that the
// communicator's send stream sends. The staging buffer is reused only once its send is
// complete.
func (c *Comm) Send(ctx context.Context, t *tensor.Tensor, to int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return c.fail("send", errors.New("communicator aborted after an earlier error"))
	}
	if err := ctx.Err(); err != nil {
		return c.fail("send", err)
	}
	release := c.gpu.bind()
	defer release()
	if err := c.send(ctx, t, to); err != nil {
		return c.fail("send", err)
	}
	return nil
}

func (c *Comm) send(ctx context.Context, t *tensor.Tensor, to int) error {
	d := c.gpu
	bytes := int64(t.Numel() * t.DType().Size())
	buf, err := c.stagingBuffer(bytes)
	if err != nil {
		return err
	}
	if t.Device().Backend() == tensor.Backend(c.b) {
		err = c.gpu.dtod(buf.p, c.b.ptr("Send", t.Span()), bytes)
	} else {
		host := make([]byte, bytes)
		t.Device().Backend().ReadHost(t.Span(), host)
		err = c.gpu.htod(buf.p, host)
	}
	if err != nil {
		return err
	}
	copied, err := d.newEvent()
	if err != nil {
		return err
	}
	defer d.destroyEvent(copied) // released once the wait below has happened
	if err := d.record(copied, d.mainStream()); err != nil {
		return err
	}
	if err := d.waitEvent(c.sendS, copied); err != nil {
		return err
	}
	if err := c.nccl.Send(ctx, buf.p, t.Numel(), ncclType(t.DType()), to, c.h, c.sendS); err != nil {
		return err
	}
	if err := d.record(buf.done, c.sendS); err != nil {
		return err
	}
	c.staging = append(c.staging, buf)
	return nil
}

// stagingBuffer returns a staging buffer of at least bytes whose previous send is done,
// taking it out of the list, or a new one.
func (c *Comm) stagingBuffer(bytes int64) (staged, error) {
	for i, s := range c.staging {
		if s.bytes < bytes {
			continue
		}
		done, err := c.gpu.reached(s.done)
		if err != nil {
			return staged{}, err
		}
		if done {
			c.staging = append(c.staging[:i], c.staging[i+1:]...)
			return s, nil
		}
	}
	p, err := c.b.alloc.get(max(bytes, 1))
	if err != nil {
		return staged{}, err
	}
	ev, err := c.gpu.newEvent()
	if err != nil {
		c.b.alloc.put(p)
		return staged{}, err
	}
	return staged{p: p, bytes: roundSize(max(bytes, 1)), done: ev}, nil
}
