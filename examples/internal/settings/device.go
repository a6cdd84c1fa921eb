package settings

import (
	"fmt"
	"slices"

	"megago/tensor"
)

// checkDevice checks --device against the backends registered with package tensor
// (the examples register cuda by importing internal/device) and
// --distributed-backend against it: NCCL runs on CUDA devices only.
func (c *Common) checkDevice() []string {
	var errs []string
	if !slices.Contains(tensor.Backends(), c.Device) {
		errs = append(errs, fmt.Sprintf("--device %q: want one of %v", c.Device, tensor.Backends()))
	}
	switch c.DistributedBackend {
	case "tcp", "gloo":
	case "nccl":
		if c.Device != "cuda" {
			errs = append(errs, fmt.Sprintf("--distributed-backend nccl requires --device cuda (NCCL runs on GPUs), not --device %s", c.Device))
		}
	default:
		errs = append(errs, fmt.Sprintf("--distributed-backend %q: want tcp, gloo (same as tcp) or nccl", c.DistributedBackend))
	}
	return errs
}

// NCCL reports whether the ranks communicate with NCCL (--distributed-backend nccl).
func (c *Common) NCCL() bool { return c.DistributedBackend == "nccl" }
