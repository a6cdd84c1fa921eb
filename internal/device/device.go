package device

import (
	"errors"
	"fmt"
	"io"

	_ "megago/cuda" // registers the "cuda" backend with package tensor
	"megago/tensor"
)

// Open opens a new device on the backend registered with package tensor under name
// (cpu, cuda). Each call opens a backend of its own: on cuda a stream, a caching
// allocator and a cuBLASLt handle on the GPU of cuda.AutoDevice, so goroutine ranks that
// each open one share the GPU without sharing a stream (NCCL collectives between them
// cannot wait behind one another's kernels). Without a usable GPU the error wraps
// cuda.ErrNoDevice and is at most three lines long.
func Open(name string) (*tensor.Device, error) {
	known := false
	for _, b := range tensor.Backends() {
		known = known || b == name
	}
	if !known {
		return nil, fmt.Errorf("--device %q: want one of %v", name, tensor.Backends())
	}
	dev, err := tensor.Open(name)
	if err != nil {
		return nil, short("--device "+name, err)
	}
	return dev, nil
}

// Close returns dev's cached storage to its backend and closes the backend when it
// holds resources of its own (a GPU's stream and memory). dev must not be used
// afterwards.
func Close(dev *tensor.Device) error {
	dev.EmptyCache()
	if c, ok := dev.Backend().(io.Closer); ok {
		if err := c.Close(); err != nil {
			return fmt.Errorf("closing device %s: %w", dev, err)
		}
	}
	return nil
}

// CloseAll closes every device of devs (Close) and returns their errors joined.
func CloseAll(devs []*tensor.Device) error {
	var errs []error
	for _, d := range devs {
		errs = append(errs, Close(d))
	}
	return errors.Join(errs...)
}
